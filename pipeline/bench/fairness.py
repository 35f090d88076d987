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
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from pipeline.bench.load import LoadReport, latency_percentiles, run_load
from pipeline.bench.workload import make_texts
from pipeline.client import (
    ReplyBatch,
    RequestOptions,
    ResultListener,
    TranslationClient,
    build_requests,
)
from pipeline.contract.pairs import RESULTS_TOPIC
from pipeline.settings import Settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess


def steady_load(settings: Settings, n: int, rate: float, seed: int) -> LoadReport:
    """A fresh tenant's paced requests and their results."""
    options = RequestOptions(timeout_ms=600_000, tenant=f"steady-{uuid.uuid4().hex[:8]}")
    requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)
    return run_load(settings.kafka, requests, rate=rate)


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


@dataclass
class Phase:
    """One steady load: its summary figures and every latency (for pooled percentiles)."""

    summary: dict[str, Any]
    latencies_ms: list[float]


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
) -> Phase:
    env = {"BABELSTREAM_TENANTS__FAIR_SHARE": "true" if fair else "false"}
    if quantum_chars is not None:
        env["BABELSTREAM_TENANTS__QUANTUM_CHARS"] = str(quantum_chars)
    log_path = settings.stack.home / "log" / f"bench-fairness-{seed}.log"
    with WorkerProcess(settings, log_path=log_path, env=env) as worker:
        if not flood:
            report = steady_load(settings, steady, rate, seed)
            return Phase(report.summary(), report.latencies_ms())
        with Flood(settings, flood, seed, flood_timeout_ms) as burst:
            read_ahead_s = burst.wait_read_ahead(worker, limit_s=600) if fair else 0.0
            report = steady_load(settings, steady, rate, seed + 1)
            summary = report.summary()
            summary["flood_done_by_then"] = burst.done()
            burst.finish(limit_s=flood_timeout_ms / 1000 + 60)
        summary["read_ahead_s"] = round(read_ahead_s, 1)
        return Phase(summary, report.latencies_ms())


def _pooled(phases: list[Phase]) -> dict[str, float]:
    p50, p95, p99 = latency_percentiles([ms for phase in phases for ms in phase.latencies_ms])
    return {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "p99_ms": round(p99, 1)}


def _ratio(loaded: float, alone: float) -> float:
    return round(loaded / alone, 3) if alone else float("nan")


# seeds of each repeat's texts are this far apart, so every request of every phase is a miss
SEED_STRIDE = 1000


def measure_fairness(
    settings: Settings,
    *,
    flood: int,
    steady: int,
    rate: float,
    repeat: int = 1,
    quantum_chars: int | None = None,
    flood_timeout_ms: int = 300_000,
) -> dict[str, Any]:
    """Steady-tenant P99 alone, under a flood with fair share, and under it without.

    The alone and fair-share phases alternate ``repeat`` times (so slow drift on
    the machine hits both alike) and their percentiles are taken over every
    latency of every repeat: a P99 of a few hundred requests is its few
    slowest, and one machine hiccup moves it by half. First come first served
    runs once (its ratio is in the tens or hundreds).
    """

    def phase(fair: bool, flood_n: int, seed: int) -> Phase:
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

    alone: list[Phase] = []
    fair: list[Phase] = []
    for i in range(repeat):
        alone.append(phase(True, 0, 31 + i * SEED_STRIDE))
        fair.append(phase(True, flood, 41 + i * SEED_STRIDE))
    fifo = phase(False, flood, 51)
    pooled_alone, pooled_fair = _pooled(alone), _pooled(fair)
    fifo_p99 = fifo.summary["p99_ms"]
    fair_ratio = _ratio(pooled_fair["p99_ms"], pooled_alone["p99_ms"])
    return {
        "bench": "fairness",
        "flood_requests": flood,
        "steady_requests": steady,
        "steady_rate": rate,
        "repeat": repeat,
        "quantum_chars": quantum_chars or settings.tenants.quantum_chars,
        "alone": pooled_alone,
        "flood_fair": pooled_fair,
        "p99_alone_ms": pooled_alone["p99_ms"],
        "p99_flood_fair_ms": pooled_fair["p99_ms"],
        "p99_flood_fifo_ms": fifo_p99,
        "p99_ratio_fair": fair_ratio,
        "p99_ratio_fifo": _ratio(fifo_p99, pooled_alone["p99_ms"]),
        "p99_ratio_fair_each": [
            _ratio(f.summary["p99_ms"], a.summary["p99_ms"])
            for a, f in zip(alone, fair, strict=True)
        ],
        "meets_2x_target": fair_ratio <= 2.0,
        "alone_runs": [a.summary for a in alone],
        "flood_fair_runs": [f.summary for f in fair],
        "flood_fifo": fifo.summary,
    }
