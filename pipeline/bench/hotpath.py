"""The pipeline's own ceiling: the real stack, router and worker, with an engine that costs nothing.

The worker runs the echo engine (``engine.backend = "echo"``): the real
translator (tokenising, the batching plan, detokenising) around a model that
is never called. What a request costs then is the pipeline's own: Kafka
consume and produce, decode, dedup, caches, spans, metrics, the router's hop.
:func:`hotpath_figures` turns one saturating run (all requests at once) into
requests/s, the worker's event-loop CPU and its whole CPU per request (and
the router's, where it runs in a process of its own);
:class:`SamplingProfile` samples the worker meanwhile (py-spy) and says where
its time went, so the figures come with their explanation.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from pipeline.bench.cpu import CpuUse
from pipeline.bench.report import LoadFigures

# leaf frames' files (as py-spy names them: from their sys.path entry), by the part of
# the stack they belong to (first match wins)
PARTS: tuple[tuple[str, str], ...] = (
    ("faust/", "faust"),
    ("mode/", "faust"),
    ("aiokafka/", "aiokafka"),
    ("kafka/", "kafka-python"),
    ("opentelemetry/", "opentelemetry"),
    ("pydantic", "pydantic"),
    ("prometheus_client/", "prometheus"),
    ("redis/", "redis"),
    ("asyncio/", "asyncio"),
    ("logging/", "logging"),
    ("json/", "json"),
    ("sentencepiece/", "sentencepiece"),
    ("pipeline/steps/", "steps"),
    ("pipeline/fidelity/", "fidelity"),
    ("pipeline/engine/", "engine"),
    ("pipeline/contract/", "contract"),
    ("pipeline/", "pipeline (other)"),
    ("workers/", "worker shell"),
)


@dataclass(frozen=True, slots=True)
class HotPathFigures:
    """One saturating run of distinct requests through the echo engine."""

    requests: int
    throughput_rps: float
    # CPU of the worker's event-loop thread, and of the whole worker process, per request
    loop_cpu_ms_per_request: float | None
    worker_cpu_ms_per_request: float | None
    p50_ms: float
    p99_ms: float
    # CPU of the router's process per request, where it runs apart (else in the worker's)
    router_cpu_ms_per_request: float | None = None


def _ms_per_request(cores: float, cpu: CpuUse, requests: int) -> float:
    return round(cores * cpu.wall_s / requests * 1000, 3)


def hotpath_figures(run: LoadFigures) -> HotPathFigures:
    """Per-request CPU from a run's :class:`~pipeline.bench.cpu.CpuUse` (cores x wall)."""
    cpu, router, n = run.cpu, run.router_cpu, max(1, run.results)
    loop = worker = router_ms = None
    if cpu is not None:
        loop_cores = cpu.loop_cores or 0.0
        loop = _ms_per_request(loop_cores, cpu, n)
        worker = _ms_per_request(cpu.engine_cores + loop_cores, cpu, n)
    if router is not None:
        router_ms = _ms_per_request(router.engine_cores + (router.loop_cores or 0.0), router, n)
    return HotPathFigures(
        run.results, run.throughput_rps, loop, worker, run.p50_ms, run.p99_ms, router_ms
    )


def part_of(frame: str) -> str:
    """The part of the stack a frame (``function (path:line)``) belongs to."""
    # py-spy names files relative to their sys.path entry (faust/..., pipeline/...)
    for marker, part in PARTS:
        if f"({marker}" in frame or f"/{marker}" in frame:
            return part
    return "other" if "(" in frame else "native"


def where_time_went(collapsed: str, top: int = 12) -> dict[str, object]:
    """Shares of samples by the part of the stack of each sample's innermost frame, and
    the innermost functions that took most, from py-spy's collapsed stacks."""
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        parts[part_of(leaf)] += int(count)
        leaves[leaf] += int(count)
    total = sum(parts.values()) or 1
    return {
        "samples": sum(parts.values()),
        "by_part": {k: round(v / total, 3) for k, v in parts.most_common()},
        "top_functions": {k: round(v / total, 3) for k, v in leaves.most_common(top)},
    }


def py_spy() -> str | None:
    """The py-spy program beside this interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class SamplingProfile:
    """py-spy sampling process ``pid`` (every thread, idle time left out) for a ``with``
    block; the collapsed stacks land in ``out``. Non-blocking: the worker is never paused."""

    def __init__(self, pid: int, out: Path, rate_hz: int = 200) -> None:
        program = py_spy()
        if program is None:
            raise FileNotFoundError("py-spy is not installed (pip install py-spy)")
        self.out = out
        self._command = [
            *(program, "record", "--pid", str(pid), "--format", "raw", "--nonblocking"),
            *("--rate", str(rate_hz), "--output", str(out)),
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SamplingProfile:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def summary(self) -> dict[str, object]:
        """:func:`where_time_went` of the recorded stacks (empty when nothing was written)."""
        text = self.out.read_text(encoding="utf-8") if self.out.exists() else ""
        return where_time_went(text)
