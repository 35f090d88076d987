"""The HTTP gateway against producing the same texts straight to Kafka, on one worker.

* :func:`measure_http` — N concurrent HTTP clients, each sending single-text
  ``/translate`` calls one after another (all texts, or paced at a rate),
  under an API key of a fresh tenant (no cache entry of an earlier run can
  answer); latency is what the client saw, send to answer.
* the Kafka path is :func:`pipeline.bench.e2e.measure_e2e` on the same kind
  of workload (a fresh tenant too).
* beside a heavy caller: the same paced calls while one anonymous caller
  sends calls at the gateway's limits (``char_limit`` characters in up to
  ``batch_limit`` texts) one after another; fair share must keep the small
  callers' latency near what it is alone.

Both report the worker's engine batch sizes over the run (the mean must be
far above 1: calls meet in engine batches), the cores the worker's engine
and everything else kept busy, and for the HTTP run the gateway's own CPU.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import psutil

from pipeline.bench.cpu import measured_cpu
from pipeline.bench.e2e import stats_delta
from pipeline.bench.load import latency_percentiles
from pipeline.bench.report import LoadFigures
from pipeline.bench.target import BenchTarget
from pipeline.gateway.keys import KeyStore
from pipeline.gateway.process import GatewayProcess
from pipeline.settings import Settings
from pipeline.stack.local_worker import WorkerProcess
from pipeline.storage.redis_client import redis_client

LOAD_DEADLINE_MS = 600_000


@dataclass(frozen=True, slots=True)
class HttpRun:
    """What the clients saw: one latency (ms) and status per call, and the run's wall time;
    ``heavy_statuses``: the heavy caller's calls, by status."""

    latencies_ms: list[float]
    statuses: list[int]
    wall_s: float
    heavy_statuses: dict[str, int]


def heavy_calls(texts: Sequence[str], char_limit: int, batch_limit: int) -> list[list[str]]:
    """``texts`` packed in order into calls at the limits: each call as many texts as fit in
    ``char_limit`` characters, at most ``batch_limit`` (a longer text is left out)."""
    calls: list[list[str]] = []
    current: list[str] = []
    chars = 0
    for text in texts:
        if len(text) > char_limit:
            continue
        if current and (chars + len(text) > char_limit or len(current) == batch_limit):
            calls.append(current)
            current, chars = [], 0
        current.append(text)
        chars += len(text)
    if current:
        calls.append(current)
    return calls


async def _load(
    url: str,
    bodies: Sequence[dict[str, Any]],
    clients: int,
    rate: float | None,
    heavy: Sequence[dict[str, Any]] = (),
) -> HttpRun:
    latencies: list[float] = [0.0] * len(bodies)
    statuses: list[int] = [0] * len(bodies)
    heavy_statuses: Counter[int] = Counter()
    timeout = aiohttp.ClientTimeout(total=600)
    # the heavy caller has a connection of its own
    connector = aiohttp.TCPConnector(limit=clients + 1)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        load_done = asyncio.Event()

        async def heavy_caller() -> None:
            for body in heavy:  # one call after another, until the small calls are answered
                if load_done.is_set():
                    return
                async with session.post(f"{url}/translate", json=body) as answer:
                    await answer.read()
                    heavy_statuses[answer.status] += 1

        heavy_task = asyncio.create_task(heavy_caller())

        async def call(i: int) -> None:
            began = time.perf_counter()
            async with session.post(f"{url}/translate", json=bodies[i]) as answer:
                await answer.read()
                statuses[i] = answer.status
            latencies[i] = (time.perf_counter() - began) * 1000

        started = time.perf_counter()
        if rate is None:
            queue = iter(range(len(bodies)))

            async def client() -> None:
                for i in queue:  # the clients share one iterator: each takes the next text
                    await call(i)

            await asyncio.gather(*(client() for _ in range(clients)))
        else:
            tasks = []
            for i in range(len(bodies)):
                await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                tasks.append(asyncio.create_task(call(i)))
            await asyncio.gather(*tasks)
        wall_s = time.perf_counter() - started
        load_done.set()
        await heavy_task
        return HttpRun(
            latencies,
            statuses,
            wall_s,
            {str(k): v for k, v in sorted(heavy_statuses.items())},
        )


def fresh_key(settings: Settings) -> str:
    """An API key of a tenant of its own (so no cache entry of an earlier run answers)."""
    client = redis_client(settings.redis)
    try:
        key, _ = KeyStore(client, settings.redis.key_prefix).add(
            f"bench-{uuid.uuid4().hex[:8]}", "bench gateway"
        )
    finally:
        client.close()
    return key


def measure_http(
    settings: Settings,
    target: BenchTarget,
    worker: WorkerProcess,
    gateway: GatewayProcess,
    texts: Sequence[str],
    clients: int,
    rate: float | None = None,
    heavy: Sequence[Sequence[str]] = (),
) -> tuple[LoadFigures, float, dict[str, int]]:
    """Single-text calls through the gateway, beside ``heavy``'s calls sent without a key;
    (figures, the gateway's cores over the run, the heavy calls by status)."""
    if settings.tenants.fair_share and worker.last_request_at is not None:
        time.sleep(max(0.0, worker.last_request_at + settings.tenants.active_s - time.monotonic()))
    assert worker.pid is not None and gateway.pid is not None
    pair = target.entry.pair
    key = fresh_key(settings)
    # a deadline past any queueing: every call is answered with its translation, not a 504
    bodies = [
        {
            "q": text,
            "source": pair.source,
            "target": pair.target,
            "api_key": key,
            "deadline_ms": LOAD_DEADLINE_MS,
        }
        for text in texts
    ]
    heavy_bodies = [
        {"q": list(call), "source": pair.source, "target": pair.target} for call in heavy
    ]
    before = worker.stats()
    gateway_process = psutil.Process(gateway.pid)
    gateway_cpu = sum(gateway_process.cpu_times()[:2])
    with measured_cpu(worker.pid, loop_thread=True) as meter:
        run = asyncio.run(_load(gateway.url, bodies, clients, rate, heavy_bodies))
    gateway_cores = (sum(gateway_process.cpu_times()[:2]) - gateway_cpu) / run.wall_s
    worker.last_request_at = time.monotonic()
    delta = stats_delta(before, worker.stats())
    ok = [lat for lat, status in zip(run.latencies_ms, run.statuses, strict=True) if status == 200]
    p50, p95, p99 = latency_percentiles(ok)
    busy = delta["engine_seconds"] / run.wall_s if run.wall_s else None
    figures = LoadFigures(
        requests=len(texts),
        results=len(ok),
        missing=len(texts) - len(ok),
        duration_s=round(run.wall_s, 3),
        throughput_rps=round(len(ok) / run.wall_s, 2),
        tokens_per_s=0.0,
        p50_ms=round(p50, 1),
        p95_ms=round(p95, 1),
        p99_ms=round(p99, 1),
        statuses={str(k): v for k, v in sorted(Counter(run.statuses).items())},
        **delta,
        engine_busy_ratio=round(busy, 3) if busy is not None else None,
        offered_rps=rate,
        cpu=meter.use,
    )
    return figures, round(gateway_cores, 3), run.heavy_statuses


def mean_batch(sizes: dict[str, int]) -> float | None:
    """The mean engine batch size of a run (texts per engine call)."""
    calls = sum(sizes.values())
    return round(sum(int(size) * n for size, n in sizes.items()) / calls, 2) if calls else None
