"""A steady tenant's latency while another tenant floods the same pair.

Three phases, each on fresh texts (every request a cache miss): the steady
tenant alone at a moderate rate; then the same steady load while a flooding
tenant has just submitted thousands of requests at once, with fair share on;
then the same with fair share off (first come, first served). Each phase
starts its own worker (the setting is read at start-up) and waits until the
flood is drained before the next.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from pipeline.bench.load import run_load
from pipeline.bench.workload import make_texts
from pipeline.client import RequestOptions, TranslationClient, build_requests
from pipeline.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.messages import TranslationRequest
from pipeline.settings import Settings

FLOOD_TIMEOUT_MS = 3_600_000


def steady_load(settings: Settings, n: int, rate: float, seed: int) -> dict[str, Any]:
    """A fresh tenant's paced requests; the load summary (P50/P95/P99 latency, ...)."""
    options = RequestOptions(timeout_ms=600_000, tenant=f"steady-{uuid.uuid4().hex[:8]}")
    requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)
    return run_load(settings.kafka, requests, rate=rate).summary()


def flood_load(
    settings: Settings, n: int, seed: int
) -> tuple[threading.Thread, list[TranslationRequest]]:
    """Submit ``n`` requests of a fresh tenant at once, in the background."""
    options = RequestOptions(timeout_ms=FLOOD_TIMEOUT_MS, tenant=f"flood-{uuid.uuid4().hex[:8]}")
    requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)

    def submit() -> None:
        with TranslationClient(settings.kafka) as client:
            client.submit(requests)

    thread = threading.Thread(target=submit, daemon=True)
    thread.start()
    return thread, requests


def _drained(settings: Settings, limit_s: float) -> bool:
    """Wait until the worker's work topics have nothing left (committed up to the end)."""
    from kafka import KafkaAdminClient, KafkaConsumer

    from pipeline.kafka_clients import kafka_python_options

    admin = KafkaAdminClient(**kafka_python_options(settings.kafka, "bench-lag"))
    consumer = KafkaConsumer(**kafka_python_options(settings.kafka, "bench-lag"))
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            committed = admin.list_consumer_group_offsets("babelstream")
            mine = {
                tp: meta.offset for tp, meta in committed.items() if tp.topic.endswith(DEMO_PAIR.id)
            }
            ends = consumer.end_offsets(list(mine))
            if all(ends[tp] <= offset for tp, offset in mine.items()):
                return True
            time.sleep(1.0)
        return False
    finally:
        admin.close()
        consumer.close()


def _phase(
    settings: Settings,
    env: dict[str, str],
    log_name: str,
    flood: int,
    steady: int,
    rate: float,
    seed: int,
) -> dict[str, Any]:
    log_path = settings.stack.home / "log" / log_name
    with WorkerProcess(settings, log_path=log_path, env=env):
        sender = flood_load(settings, flood, seed)[0] if flood else None
        if sender is not None:
            time.sleep(1.0)  # let the flood land in the partitions first
        summary = steady_load(settings, steady, rate, seed + 1)
        if sender is not None:
            sender.join()
            summary["flood_drained"] = _drained(settings, limit_s=1800)
    return summary


def measure_fairness(
    settings: Settings,
    *,
    flood: int,
    steady: int,
    rate: float,
    quantum_chars: int | None = None,
) -> dict[str, Any]:
    """Steady-tenant P99 alone, under a flood with fair share, and under it without."""
    fair = {"BABELSTREAM_TENANTS__FAIR_SHARE": "true"}
    if quantum_chars is not None:
        fair["BABELSTREAM_TENANTS__QUANTUM_CHARS"] = str(quantum_chars)
    fifo = {"BABELSTREAM_TENANTS__FAIR_SHARE": "false"}
    alone = _phase(settings, fair, "bench-fair-alone.log", 0, steady, rate, seed=31)
    with_fair = _phase(settings, fair, "bench-fair-on.log", flood, steady, rate, seed=41)
    without = _phase(settings, fifo, "bench-fair-off.log", flood, steady, rate, seed=51)

    def ratio(loaded: dict[str, Any]) -> float:
        return round(loaded["p99_ms"] / alone["p99_ms"], 3) if alone["p99_ms"] else float("nan")

    return {
        "bench": "fairness",
        "flood_requests": flood,
        "steady_requests": steady,
        "steady_rate": rate,
        "quantum_chars": quantum_chars or settings.tenants.quantum_chars,
        "p99_alone_ms": alone["p99_ms"],
        "p99_flood_fair_ms": with_fair["p99_ms"],
        "p99_flood_fifo_ms": without["p99_ms"],
        "p99_ratio_fair": ratio(with_fair),
        "p99_ratio_fifo": ratio(without),
        "meets_2x_target": ratio(with_fair) <= 2.0,
        "alone": alone,
        "flood_fair": with_fair,
        "flood_fifo": without,
    }
