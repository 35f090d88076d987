"""store: remember what this batch found or translated, for the next requests."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields, TransientError
from pipeline.steps.window import DedupWindow
from pipeline.storage.cache import CachedTranslation, TwoLevelCache


class Store:
    """Writes fresh translations to both caches and everything answered to the window.

    Reads: ``translation``/``cache`` of leaders. Writes: the dedup window for
    every translation not already from it (so the partition's table remembers
    it across restarts), L1 and L2 for engine output. Raises:
    :class:`TransientError` when the window cannot be written; cache failures
    only degrade the cache.
    """

    reads: ClassVar[Fields] = frozenset({"translation", "leader"})
    sets: ClassVar[Fields] = frozenset()

    in_canary: ClassVar[bool] = False  # a canary writes no cache or window

    def __init__(self, cache: TwoLevelCache, window: DedupWindow) -> None:
        self._cache = cache
        self._window = window

    async def __call__(self, batch: Batch) -> None:
        fresh: dict[str, CachedTranslation] = {}
        for item in batch.pending():
            if item.leader or item.translation is None or item.cache == "window":
                continue
            try:
                self._window.put(item, item.translation)
            except TransientError:
                raise
            except Exception as exc:
                raise TransientError(f"dedup window write failed: {exc}") from exc
            if item.cache == "miss" and item.digest:
                fresh[item.digest] = item.translation
        await self._cache.put_many(fresh)
