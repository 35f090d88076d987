"""``bench compare``'s protocol: the engine ceiling, the pipeline, the ceiling again, naive.

A shared machine's speed drifts by more than the gap e2e/engine measures
(seen: 10 % within minutes), so the pipeline's run is held against the
engine's mean time over two ceilings, one measured before it and one after
(A-B-A); the naive consumer runs last. The measurements are passed in, so the
order and the ratios are tested without Kafka or a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.bench.report import (
    EngineFigures,
    LoadFigures,
    bracketed_core_rate,
    bracketed_rate,
    engine_core_rate,
    ratio,
)


@dataclass(frozen=True, slots=True)
class CompareRuns:
    """The four runs of one ``bench compare``, in the order they ran."""

    engine: EngineFigures
    e2e: LoadFigures
    engine_after: EngineFigures
    naive: LoadFigures

    def ratios(self) -> dict[str, float | None]:
        """e2e/engine (against the bracketing ceilings), e2e/naive, the machine's drift."""
        return {
            "e2e_over_engine": ratio(
                self.e2e.throughput_rps, bracketed_rate(self.engine, self.engine_after)
            ),
            "e2e_over_naive": ratio(self.e2e.throughput_rps, self.naive.throughput_rps),
            "engine_after_over_before": ratio(
                self.engine_after.sentences_per_s, self.engine.sentences_per_s
            ),
            # the same, per core the engine kept busy: what is left of e2e/engine once the
            # CPU that the broker, the load client and the worker's loop took is set aside
            "e2e_over_engine_per_engine_core": ratio(
                engine_core_rate(self.e2e), bracketed_core_rate(self.engine, self.engine_after)
            ),
        }


def run_compare(
    ceiling: Callable[[], EngineFigures],
    e2e: Callable[[], LoadFigures],
    naive: Callable[[], LoadFigures],
) -> CompareRuns:
    """Ceiling, e2e, ceiling again, then naive: each measurement once, in that order."""
    before = ceiling()
    pipeline_run = e2e()
    after = ceiling()
    return CompareRuns(before, pipeline_run, after, naive())
