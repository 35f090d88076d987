"""cache: the two-level translation cache (in-process LRU, then Redis)."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields
from pipeline.storage.cache import TwoLevelCache


class CacheLookup:
    """Answers unanswered items from L1, then L2.

    Reads: ``digest``. Sets: ``translation`` and ``cache`` (``l1``/``l2``).
    Raises: nothing: a failing or corrupt L2 is a miss (counted by the cache),
    never a failed request.
    """

    reads: ClassVar[Fields] = frozenset({"digest"})
    sets: ClassVar[Fields] = frozenset({"translation", "cache"})

    in_canary: ClassVar[bool] = False  # a canary must reach the engine, not a cached copy

    def __init__(self, cache: TwoLevelCache) -> None:
        self._cache = cache

    async def __call__(self, batch: Batch) -> None:
        unanswered = {item.digest: item for item in batch.unanswered() if item.digest}
        for digest, (value, level) in (await self._cache.get_many(list(unanswered))).items():
            item = unanswered[digest]
            item.translation, item.cache = value, level
