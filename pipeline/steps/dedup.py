"""dedup: identical requests in one micro-batch are translated once."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields, Item


class InBatchDedup:
    """Points every later item with an earlier item's digest at that earlier item.

    Reads: ``digest``. Sets: ``leader`` on the copies; only leaders go through
    window, cache and engine, and each copy is answered with its leader's
    translation (cache level ``window``). Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"digest"})
    sets: ClassVar[Fields] = frozenset({"leader"})

    async def __call__(self, batch: Batch) -> None:
        leaders: dict[str, Item] = {}
        for item in batch.pending():
            if item.digest is None:
                continue
            leader = leaders.setdefault(item.digest, item)
            if leader is not item:
                item.leader = leader
