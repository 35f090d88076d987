"""Where a run's CPU went: the engine's process, its event loop, and everything else.

On a machine of a few cores the broker, the bench's own load client and the
worker's event loop share the cores the engine computes on, so an e2e run
can keep every engine replica busy and still translate slower than the
engine's ceiling did alone: its calls got less CPU. :class:`CpuMeter` says
how much, from the kernel's per-thread CPU times (psutil), so ``bench
compare`` can hold e2e against the ceiling per engine core as well as per
second.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class CpuUse:
    """Cores (CPU seconds per wall second) each part of the machine kept busy over a run."""

    wall_s: float
    # the measured process, less its main thread where that is an event loop
    engine_cores: float
    # the measured process's main thread (a worker's event loop); None when it computes
    loop_cores: float | None
    # every other process on the machine (broker, load client, Redis, ...)
    other_cores: float
    machine_cores: int


# CPU time fields that are work, not idle (psutil names them per platform; guest time
# is counted in user time already)
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


def _busy_s() -> float:
    """CPU seconds every process on the machine has kept busy since boot."""
    times = psutil.cpu_times()
    return float(sum(getattr(times, name, 0.0) for name in _BUSY_FIELDS))


class CpuMeter:
    """CPU of process ``pid`` (its main thread apart, with ``loop_thread``) and of the rest.

    Measure with :func:`measured_cpu`; :attr:`use` holds the figures after the run.
    """

    def __init__(self, pid: int, *, loop_thread: bool = False) -> None:
        self._process = psutil.Process(pid)
        self._loop_thread = loop_thread
        self._start = self._sample()
        self.use: CpuUse | None = None

    def _sample(self) -> tuple[float, float, float, float]:
        """(wall, process CPU, its main thread's CPU, machine busy CPU), in seconds."""
        # the process's own times include threads that have ended since; a thread's
        # only its own while it lives (the main thread lives as long as the process)
        with self._process.oneshot():
            times = self._process.cpu_times()
            main = sum(
                t.user_time + t.system_time
                for t in self._process.threads()
                if t.id == self._process.pid
            )
        total = times.user + times.system
        return time.monotonic(), total, main, _busy_s()

    def stop(self) -> None:
        """Set :attr:`use` from what ran since the meter was made."""
        wall, total, main, busy = (b - a for a, b in zip(self._start, self._sample(), strict=True))
        if wall <= 0:
            return
        loop = main if self._loop_thread else 0.0
        self.use = CpuUse(
            wall_s=round(wall, 3),
            engine_cores=round((total - loop) / wall, 3),
            loop_cores=round(loop / wall, 3) if self._loop_thread else None,
            other_cores=round(max(0.0, busy - total) / wall, 3),
            machine_cores=psutil.cpu_count() or 1,
        )


@contextmanager
def measured_cpu(pid: int, *, loop_thread: bool = False) -> Iterator[CpuMeter]:
    """A :class:`CpuMeter` over the ``with`` block; a block that raises leaves it empty."""
    meter = CpuMeter(pid, loop_thread=loop_thread)
    yield meter
    meter.stop()
