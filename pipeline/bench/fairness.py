"""A steady tenant's latency while another tenant floods the same pair.

Three phases, each on fresh texts (every request a cache miss) and its own
worker (fair share is read at start-up): the steady tenant alone at a
moderate rate; the same steady load while a flooding tenant's requests,
submitted at once, are being served first come first served; the same with
fair share on. With fair share on, the steady load
starts once the worker has read the flood ahead (fetched and held it):
reading a deep backlog takes time no scheduling can win back, and how long
it took is reported. Flood requests get a deadline, so what is left of a
flood after its phase expires without compute.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid
from types import TracebackType
from typing import Any

from pipeline.bench.load import run_load
from pipeline.bench.workload import make_texts
from pipeline.client import (
    ReplyBatch,
    RequestOptions,
    ResultListener,
    TranslationClient,
    build_requests,
)
from pipeline.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.pairs import RESULTS_TOPIC
from pipeline.settings import Settings


def steady_load(settings: Settings, n: int, rate: float, seed: int) -> dict[str, Any]:
    """A fresh tenant's paced requests; the load summary (P50/P95/P99 latency, ...)."""
    options = RequestOptions(timeout_ms=600_000, tenant=f"steady-{uuid.uuid4().hex[:8]}")
    requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)
    return run_load(settings.kafka, requests, rate=rate).summary()


# bound on reading every flood result published so far (20,000 take a few seconds)
CATCH_UP_LIMIT_S = 60.0


class Flood:
    """``n`` requests of a fresh tenant, submitted at once; counts their results as they come."""

    def __init__(self, settings: Settings, n: int, seed: int, timeout_ms: int) -> None:
        self.tenant = f"flood-{uuid.uuid4().hex[:8]}"
        options = RequestOptions(timeout_ms=timeout_ms, tenant=self.tenant)
        self.requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)
        self._settings = settings
        self._replies = ReplyBatch(request_ids=[r.request_id for r in self.requests])
        self._listener = ResultListener(settings.kafka, [RESULTS_TOPIC])

    def __enter__(self) -> Flood:
        thread = threading.Thread(target=self._submit, daemon=True)
        thread.start()
        thread.join()
        return self

    def _submit(self) -> None:
        with TranslationClient(self._settings.kafka, self._settings.limits) as client:
            client.submit(self.requests)

    def done(self) -> int:
        """Flood requests with a result so far (every result published by now is read)."""
        self._listener.catch_up(self._replies, limit_s=CATCH_UP_LIMIT_S)
        return len(self._replies.results)

    def wait_read_ahead(self, worker: WorkerProcess, limit_s: float) -> float:
        """Seconds until the worker held (or had answered) 95% of the flood."""
        started = time.monotonic()
        while held_for(worker, self.tenant) + self.done() < 0.95 * len(self.requests):
            if time.monotonic() - started > limit_s:
                raise TimeoutError(f"the worker did not read the flood ahead in {limit_s:.0f}s")
            time.sleep(1.0)
        return time.monotonic() - started

    def finish(self, limit_s: float) -> None:
        """Wait (at most ``limit_s``) until every flood request has its result, translated
        or expired, so no backlog outlives the measurement."""
        deadline = time.monotonic() + limit_s
        while self.done() < len(self.requests) and time.monotonic() < deadline:
            time.sleep(1.0)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._listener.__exit__(exc_type, exc, tb)


def held_for(worker: WorkerProcess, tenant: str) -> float:
    """Requests of ``tenant`` the worker holds for fair share (all topics), from /metrics."""
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    prefix = f'babelstream_fair_share_held{{tenant="{tenant}",'
    with urllib.request.urlopen(url, timeout=10) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))


def _phase(
    settings: Settings,
    *,
    fair: bool,
    flood: int,
    steady: int,
    rate: float,
    seed: int,
    quantum_chars: int | None,
    flood_timeout_ms: int,
) -> dict[str, Any]:
    env = {"BABELSTREAM_TENANTS__FAIR_SHARE": "true" if fair else "false"}
    if quantum_chars is not None:
        env["BABELSTREAM_TENANTS__QUANTUM_CHARS"] = str(quantum_chars)
    log_path = settings.stack.home / "log" / f"bench-fairness-{seed}.log"
    with WorkerProcess(settings, log_path=log_path, env=env) as worker:
        if not flood:
            return steady_load(settings, steady, rate, seed)
        with Flood(settings, flood, seed, flood_timeout_ms) as burst:
            read_ahead_s = burst.wait_read_ahead(worker, limit_s=600) if fair else 0.0
            summary = steady_load(settings, steady, rate, seed + 1)
            summary["flood_done_by_then"] = burst.done()
            burst.finish(limit_s=flood_timeout_ms / 1000 + 60)
        summary["read_ahead_s"] = round(read_ahead_s, 1)
        return summary


def measure_fairness(
    settings: Settings,
    *,
    flood: int,
    steady: int,
    rate: float,
    quantum_chars: int | None = None,
    flood_timeout_ms: int = 300_000,
) -> dict[str, Any]:
    """Steady-tenant P99 alone, under a flood with fair share, and under it without."""

    def phase(fair: bool, flood_n: int, seed: int) -> dict[str, Any]:
        return _phase(
            settings,
            fair=fair,
            flood=flood_n,
            steady=steady,
            rate=rate,
            seed=seed,
            quantum_chars=quantum_chars,
            flood_timeout_ms=flood_timeout_ms,
        )

    alone = phase(True, 0, 31)
    without = phase(False, flood, 51)
    with_fair = phase(True, flood, 41)

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
