"""CpuMeter: a process's CPU split into its engine threads, its loop thread and the rest."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pipeline.bench.cpu import CpuUse, measured_cpu
from pipeline.bench.report import (
    EngineFigures,
    LoadFigures,
    bracketed_core_rate,
    engine_core_rate,
    ratio,
)


def _spin(cpu_s: float) -> None:
    """Keep this thread on the CPU for ``cpu_s`` seconds of its own CPU time."""
    until = time.thread_time() + cpu_s
    while time.thread_time() < until:
        pass


def test_a_thread_that_has_ended_still_counts_as_the_engines() -> None:
    with measured_cpu(os.getpid(), loop_thread=True) as meter:
        worker = threading.Thread(target=_spin, args=(0.3,))
        worker.start()
        worker.join()
    use = meter.use
    assert use is not None and use.loop_cores is not None
    # the thread's 0.3 s are the engine's, whatever the wall time was
    assert use.engine_cores * use.wall_s >= 0.25
    assert use.loop_cores * use.wall_s < 0.1


def test_the_main_thread_is_the_loop_only_when_asked() -> None:
    with measured_cpu(os.getpid(), loop_thread=True) as as_loop:
        _spin(0.2)
    with measured_cpu(os.getpid()) as as_engine:
        _spin(0.2)
    assert as_loop.use is not None and as_loop.use.loop_cores is not None
    assert as_loop.use.loop_cores * as_loop.use.wall_s >= 0.15
    assert as_engine.use is not None and as_engine.use.loop_cores is None
    assert as_engine.use.engine_cores * as_engine.use.wall_s >= 0.15


def test_a_failed_run_has_no_figures() -> None:
    meters = []
    with pytest.raises(RuntimeError, match="the run failed"), measured_cpu(os.getpid()) as meter:
        meters.append(meter)
        raise RuntimeError("the run failed")
    assert meters[0].use is None


def _cpu(engine_cores: float) -> CpuUse:
    return CpuUse(10.0, engine_cores, None, 0.2, 2)


def _ceiling(seconds: float, engine_cores: float | None) -> EngineFigures:
    cpu = _cpu(engine_cores) if engine_cores is not None else None
    return EngineFigures(None, "int8", 100 / seconds, 0.0, 0.0, 100, seconds, cpu=cpu)


def _e2e(rps: float, engine_cores: float | None) -> LoadFigures:
    cpu = _cpu(engine_cores) if engine_cores is not None else None
    return LoadFigures(100, 100, 0, 100 / rps, rps, 0.0, 0.0, 0.0, 0.0, cpu=cpu)


def test_e2e_per_engine_core_sets_aside_the_cpu_others_took() -> None:
    # the ceiling: 100 texts in 1 s and in 1.5 s on 2 cores = 200 texts / 5 core-seconds
    assert bracketed_core_rate(_ceiling(1.0, 2.0), _ceiling(1.5, 2.0)) == 40.0
    # e2e at 70 req/s on 1.75 cores is as fast per engine core
    assert ratio(engine_core_rate(_e2e(70.0, 1.75)), 40.0) == 1.0


def test_unmeasured_cpu_gives_no_ratio() -> None:
    assert bracketed_core_rate(_ceiling(1.0, None), _ceiling(1.0, 2.0)) is None
    assert engine_core_rate(_e2e(70.0, None)) is None
    assert engine_core_rate(_e2e(70.0, 0.0)) is None
    assert ratio(None, 40.0) is None
