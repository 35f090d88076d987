"""deadline: a request whose deadline passed gets ``timeout`` without using the engine."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields


class Deadline:
    """Resolves expired requests as ``timeout`` (no compute is spent on them).

    Reads: ``request.submitted_at + timeout_ms`` (or the default). Resolves:
    ``timeout`` results. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"request"})
    sets: ClassVar[Fields] = frozenset({"result"})

    def __init__(self, default_timeout_ms: int) -> None:
        self._default_timeout_ms = default_timeout_ms

    async def __call__(self, batch: Batch) -> None:
        now = batch.clock()
        for item in batch.pending():
            if item.request and now >= item.request.deadline_ms(self._default_timeout_ms):
                batch.resolve(item, "timeout", error="deadline passed before translation")
