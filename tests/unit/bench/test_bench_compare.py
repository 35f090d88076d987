"""bench compare's protocol: the pipeline's run between two engine ceilings (A-B-A), naive
last, and the ratios from those four runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pipeline.bench.compare import run_compare
from pipeline.bench.cpu import CpuUse
from pipeline.bench.report import EngineFigures, LoadFigures

T = TypeVar("T")


def ceiling(seconds: float) -> EngineFigures:
    """100 texts in ``seconds``, 2 cores of engine."""
    return EngineFigures(
        None, "int8", 100 / seconds, 0.0, 0.0, 100, seconds, cpu=CpuUse(seconds, 2.0, None, 0, 2)
    )


def load(rps: float, engine_cores: float | None = None) -> LoadFigures:
    cpu = CpuUse(100 / rps, engine_cores, 0.3, 0.2, 2) if engine_cores is not None else None
    return LoadFigures(100, 100, 0, 100 / rps, rps, 0.0, 0.0, 0.0, 0.0, cpu=cpu)


def test_the_pipeline_runs_between_two_ceilings_and_naive_runs_last() -> None:
    order: list[str] = []
    ceilings = iter([ceiling(1.0), ceiling(1.5)])

    def step(name: str, measure: Callable[[], T]) -> Callable[[], T]:
        def run() -> T:
            order.append(name)
            return measure()

        return run

    runs = run_compare(
        step("ceiling", lambda: next(ceilings)),
        step("e2e", lambda: load(60.0, engine_cores=1.5)),
        step("naive", lambda: load(20.0)),
    )
    assert order == ["ceiling", "e2e", "ceiling", "naive"]
    assert (runs.engine.seconds, runs.engine_after.seconds) == (1.0, 1.5)
    ratios = runs.ratios()
    # against the mean time of the two ceilings: 200 texts in 2.5 s, 80 texts/s
    assert ratios["e2e_over_engine"] == 0.75
    assert ratios["e2e_over_naive"] == 3.0
    # the machine slowed down between the ceilings: 66.67 texts/s after 100
    assert ratios["engine_after_over_before"] == 0.667
    # per engine core: e2e 60/1.5 = 40 texts/s; the ceilings 200 texts / (2 x 2.5 s) = 40
    assert ratios["e2e_over_engine_per_engine_core"] == 1.0


def test_without_cpu_figures_the_per_core_ratio_is_unknown() -> None:
    runs = run_compare(lambda: ceiling(1.0), lambda: load(50.0), lambda: load(10.0))
    assert runs.ratios()["e2e_over_engine_per_engine_core"] is None
    assert runs.ratios()["e2e_over_engine"] == 0.5
