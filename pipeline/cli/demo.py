"""``make demo``: a worker on the bundled demo model, a sample with repeats, a summary.

Expects the local stack to be up (``babelstream up``); starts one worker,
translates a sample set twice over (so caches answer the repeats), prints
each translation and a summary, and stops the worker it started.
"""

from __future__ import annotations

import collections
import random
import sys
import time

import numpy as np

from pipeline.client import ReplyBatch, TranslationClient, build_requests
from pipeline.contract.messages import TranslationResult
from pipeline.contract.pairs import Pair
from pipeline.settings import load_settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerNotReady, WorkerProcess

REPEATS_AFTER_S = 3.0

SAMPLES = [
    "Hello world, 42 times!",
    "The quick brown fox jumps over the lazy dog.",
    "Kafka moves the requests; the workers translate them in batches.",
    "Please send the invoice to Chloe before Friday.",
    "Queues, caches and deadlines keep latency low.",
    "Margaret bought 3 kilos of apples in Ljubljana.",
    "Every accepted request ends as a result.",
    "Where is the train station?",
]


def main() -> int:
    settings = load_settings()
    rng = random.Random(0)
    texts = SAMPLES + [rng.choice(SAMPLES) for _ in range(24)]
    log_path = settings.stack.home / "log" / "demo-worker.log"
    print(f"starting a worker (log: {log_path}) ...", flush=True)
    try:
        worker = WorkerProcess(settings, log_path=log_path).start()
    except WorkerNotReady as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    with worker, TranslationClient(settings.kafka) as client:
        # The distinct samples (the model translates them) and their round trip,
        # then, a little later, the repeats (answered by the dedup window and
        # caches). The later traffic also moves the SLA job's event-time
        # watermark past the first windows of both pairs (docs/concepts/sla.md).
        first = client.translate(build_requests(SAMPLES, DEMO_PAIR), timeout_s=120)
        back_texts = [r.translation or "" for r in first.ordered if r]
        back = client.translate(build_requests(back_texts, Pair("en-XA", "en")), timeout_s=120)
        time.sleep(REPEATS_AFTER_S)
        repeats = client.translate(build_requests(texts[len(SAMPLES) :], DEMO_PAIR), timeout_s=120)
        forward = ReplyBatch(
            results={**first.results, **repeats.results},
            request_ids=first.request_ids + repeats.request_ids,
        )

    print("\n== en -> en-XA (first pass, then repeats) ==")
    for text, result in zip(texts, forward.ordered, strict=True):
        print(f"[{_label(result):>7}] {text}\n          -> {_outcome(result)}")
    print("\n== en-XA -> en (round trip) ==")
    for text, result in zip(back_texts, back.ordered, strict=True):
        print(f"{text}\n  -> {_outcome(result)}")

    results = [r for r in [*forward.ordered, *back.ordered] if r is not None]
    latencies = np.array([r.latency_ms for r in results], dtype=float)
    statuses = collections.Counter(r.status for r in results)
    caches = collections.Counter(r.cache or "-" for r in results if r.status == "ok")
    missing = len(forward.missing) + len(back.missing)
    print("\n== summary ==")
    print(f"requests: {len(texts) + len(back_texts)}  results: {len(results)}  missing: {missing}")
    print(f"status: {dict(statuses)}")
    print(f"answered by: {dict(caches)}  (miss = the model translated it)")
    if len(latencies):
        p50, p95 = np.percentile(latencies, [50, 95])
        print(f"latency: P50 {p50:.0f} ms  P95 {p95:.0f} ms")
    if not (forward.all_ok and back.all_ok):
        print("demo: not every request ended ok (see above)", file=sys.stderr)
        return 1
    return 0


def _label(result: TranslationResult | None) -> str:
    """The cache level that answered, or what went wrong instead."""
    if result is None:
        return "missing"
    return (result.cache or "-") if result.status == "ok" else result.status


def _outcome(result: TranslationResult | None) -> str:
    if result is None:
        return "(no result in time)"
    if result.status == "ok":
        return result.translation or ""
    return f"{result.status.upper()}: {result.error or result.reason or 'no detail'}"


if __name__ == "__main__":
    sys.exit(main())
