"""observe: count what a finished batch did (Prometheus metrics and the stats page)."""

from __future__ import annotations

import time
from typing import ClassVar, Protocol

from pipeline.observability import metrics
from pipeline.steps.base import Batch, BatchStats, Fields


class StatsSink(Protocol):
    """Running totals a worker serves on its stats page."""

    def record(self, stats: BatchStats) -> None: ...

    def routed(self, kind: str) -> None: ...


class Observe:
    """Records the batch in metrics and in the worker's running totals.

    Reads: results, outgoing kinds and stats. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"outgoing"})
    sets: ClassVar[Fields] = frozenset()

    in_canary: ClassVar[bool] = False  # a canary is not counted

    def __init__(self, totals: StatsSink, model: str | None) -> None:
        """``model``: the model the batches are of, in metrics (None: the router's batches,
        whose outgoing records are counted by kind)."""
        self._totals = totals
        self._model = model

    async def __call__(self, batch: Batch) -> None:
        if self._model is None:
            for out in batch.outgoing:
                self._totals.routed(out.kind)
                metrics.record_route(out.kind)
            return
        results = [item.result for item in batch.items if item.result is not None]
        metrics.record_batch(self._model, batch.stats, results, time.perf_counter() - batch.began)
        self._totals.record(batch.stats)
