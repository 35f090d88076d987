"""The whole pipeline and the naive consumer on the same requests.

* :func:`measure_e2e` — requests through the ingress topic, the router, a
  worker's micro-batching, dedup, caches and engine (a worker started for
  the bench, see :func:`pipeline.bench.target.bench_worker`).
* :func:`measure_naive` — the same requests through a plain kafka-python
  consumer that translates and commits one message at a time.

Each run uses a fresh tenant, so earlier runs' cache entries cannot answer,
and starts once the tenants of earlier requests (the worker's probe, the run
before) no longer count as active for fair share: while they do, the worker
serves the new tenant in short shared rounds (``tenants.active_s``), which
would measure the scheduler's guard against a flood, not the pipeline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from pipeline.bench.cpu import measured_cpu
from pipeline.bench.load import run_load
from pipeline.bench.naive import NAIVE_TOPIC
from pipeline.bench.report import LoadFigures
from pipeline.bench.target import BenchTarget
from pipeline.client import RequestOptions, build_requests
from pipeline.contract.messages import TranslationRequest
from pipeline.errors import EngineError
from pipeline.kafka.check import admin_client
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import Settings
from pipeline.stack.local_worker import WorkerProcess


def fresh_requests(texts: Sequence[str], target: BenchTarget) -> list[TranslationRequest]:
    """Requests for ``texts`` under a tenant of their own (no cache entry can answer them)."""
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    return build_requests(
        list(texts), target.entry.pair, RequestOptions(timeout_ms=3_600_000, tenant=tenant)
    )


def stats_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Takes, engine batch sizes, padding and engine time of what ran between two snapshots."""

    def counts(key: str) -> dict[str, int]:
        delta = {k: v - before[key].get(k, 0) for k, v in after[key].items()}
        return {k: v for k, v in delta.items() if v}

    padded = after["padded_tokens"] - before["padded_tokens"]
    pad = after["pad_tokens"] - before["pad_tokens"]
    return {
        # as the engine ceiling counts it: pad tokens over all padded tokens of the calls
        "padding_ratio": round(pad / padded, 4) if padded else 0.0,
        "engine_batch_sizes": counts("engine_batch_sizes"),
        "take_sizes": counts("take_sizes"),
        "engine_seconds": round(after["engine_seconds"] - before["engine_seconds"], 3),
    }


def measure_e2e(
    settings: Settings,
    target: BenchTarget,
    worker: WorkerProcess,
    texts: Sequence[str],
    rate: float | None = None,
    router: WorkerProcess | None = None,
) -> LoadFigures:
    """The requests through ``worker`` (started by the caller), at ``rate`` or all at once;
    ``router``: the router runs apart in that process (its CPU is measured too)."""
    if settings.tenants.fair_share and worker.last_request_at is not None:
        quiet_at = worker.last_request_at + settings.tenants.active_s
        time.sleep(max(0.0, quiet_at - time.monotonic()))
    if worker.pid is None:
        raise RuntimeError("measure_e2e needs a started worker")
    before = worker.stats()
    with ExitStack() as meters:
        meter = meters.enter_context(measured_cpu(worker.pid, loop_thread=True))
        router_meter = (
            meters.enter_context(measured_cpu(router.pid, loop_thread=True))
            if router is not None and router.pid is not None
            else None
        )
        report = run_load(settings.kafka, fresh_requests(texts, target), rate=rate)
    worker.last_request_at = time.monotonic()
    after = worker.stats()
    summary = report.summary()
    delta = stats_delta(before, after)
    busy = delta["engine_seconds"] / summary["duration_s"] if summary["duration_s"] else None
    return LoadFigures.from_summary(
        summary,
        **delta,
        engine_busy_ratio=round(busy, 3) if busy is not None else None,
        offered_rps=rate,
        cpu=meter.use,
        router_cpu=router_meter.use if router_meter is not None else None,
    )


@contextmanager
def naive_consumer(settings: Settings, target: BenchTarget) -> Iterator[str]:
    """The naive consumer in a process of its own, warmed up; yields the topic it consumes.

    The topic is the run's own (created with a pair topic's partition count,
    deleted afterwards): a consumer reading a shared topic from the start
    would first translate every earlier run's requests.
    """
    run = uuid.uuid4().hex[:8]
    topic, group = f"{NAIVE_TOPIC}.{run}", f"bench-naive-{run}"
    ensure_topics(settings.kafka, {topic: TopicSpec(settings.kafka.work_partitions)})
    log_path = settings.stack.home / "log" / "bench-naive.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pipeline.bench.naive",
        "--topic",
        topic,
        "--group",
        group,
        "--pair",
        target.pair_id,
    ]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            command, env={**os.environ, **target.env()}, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        # Warm-up: model loaded and partitions assigned before the clock starts.
        warm = run_load(
            settings.kafka, fresh_requests(["ready?"], target), topic=topic, timeout_s=300
        )
        if warm.replies.missing:
            raise EngineError(f"the naive consumer did not answer its warm-up; see {log_path}")
        yield topic
    finally:
        proc.terminate()
        proc.wait(30)
        admin = admin_client(settings.kafka, "bench-naive")
        try:
            admin.delete_topics([topic])
        finally:
            admin.close()


def measure_naive(
    settings: Settings,
    target: BenchTarget,
    texts: Sequence[str],
    rate: float | None = None,
) -> LoadFigures:
    """One-at-a-time consumer on the same texts and model."""
    with naive_consumer(settings, target) as topic:
        report = run_load(settings.kafka, fresh_requests(texts, target), rate=rate, topic=topic)
    summary = report.summary()
    return LoadFigures.from_summary(
        summary, padding_ratio=0.0, engine_batch_sizes={"1": summary["results"]}, offered_rps=rate
    )
