"""Drive a pipeline with requests and measure what comes back."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.client import ReplyBatch, ResultListener, TranslationClient
from pipeline.contract.messages import TranslationRequest, now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC, RESULTS_TOPIC
from pipeline.observability.progress import progress_bar
from pipeline.settings import KafkaSettings


@dataclass(frozen=True)
class LoadReport:
    """Raw outcome of one load run."""

    requests: Sequence[TranslationRequest]
    replies: ReplyBatch
    wall_s: float

    def latencies_ms(self) -> list[float]:
        """Each result's latency (submitted to published), in request order."""
        return [float(r.latency_ms) for r in self.replies.ordered if r is not None]

    def summary(self) -> dict[str, Any]:
        """The figures every ``bench`` command prints."""
        results = [r for r in self.replies.ordered if r is not None]
        ok = [r for r in results if r.status == "ok"]
        p50, p95, p99 = latency_percentiles(self.latencies_ms())
        span_ms = (
            max(r.completed_at for r in results) - min(r.submitted_at for r in results)
            if results
            else 0
        )
        span_s = max(span_ms / 1000, 1e-9)
        tokens = sum((r.output_tokens or 0) for r in ok)
        return {
            "requests": len(self.requests),
            "results": len(results),
            "missing": len(self.replies.missing),
            "statuses": dict(Counter(r.status for r in results)),
            "duration_s": round(span_s, 3),
            "throughput_rps": round(len(results) / span_s, 2),
            "tokens_per_s": round(tokens / span_s, 1),
            "p50_ms": round(p50, 1),
            "p95_ms": round(p95, 1),
            "p99_ms": round(p99, 1),
            "cache_hit_ratio": round(sum(r.cache != "miss" for r in ok) / len(ok), 4)
            if ok
            else 0.0,
            "cache_levels": dict(Counter(r.cache for r in ok)),
        }


def latency_percentiles(latencies_ms: Sequence[float]) -> tuple[float, float, float]:
    """P50, P95 and P99 (NaN when there are none)."""
    if not latencies_ms:
        return (float("nan"),) * 3
    p50, p95, p99 = np.percentile(np.array(latencies_ms, dtype=float), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def run_load(
    kafka: KafkaSettings,
    requests: Sequence[TranslationRequest],
    *,
    rate: float | None = None,
    topic: str = REQUESTS_TOPIC,
    timeout_s: float = 600.0,
) -> LoadReport:
    """Publish ``requests`` (all at once, or paced at ``rate`` per second) and collect results."""
    replies = ReplyBatch(request_ids=[r.request_id for r in requests])
    started = time.monotonic()
    with TranslationClient(kafka) as client, ResultListener(kafka, [RESULTS_TOPIC]) as listener:
        sender = threading.Thread(
            target=_publish, args=(client, requests, rate, topic), daemon=True
        )
        sender.start()
        with progress_bar("results", total=len(requests), unit="req", leave=False) as progress:
            deadline = time.monotonic() + timeout_s
            while replies.missing and time.monotonic() < deadline:
                before = len(replies.results)
                listener.collect(replies, timeout_s=0.5)
                progress.update(len(replies.results) - before)
        sender.join()
    return LoadReport(requests, replies, time.monotonic() - started)


def _publish(
    client: TranslationClient,
    requests: Sequence[TranslationRequest],
    rate: float | None,
    topic: str,
) -> None:
    if not rate:
        client.submit(requests, topic=topic)
        return
    chunk = max(1, int(rate / 20))  # ~20 sends a second
    start = time.monotonic()
    for i in range(0, len(requests), chunk):
        due = start + i / rate
        time.sleep(max(0.0, due - time.monotonic()))
        # Stamp at send time: pacing delay is not pipeline latency.
        sent = now_ms()
        batch = [r.model_copy(update={"submitted_at": sent}) for r in requests[i : i + chunk]]
        client.submit(batch, topic=topic)
