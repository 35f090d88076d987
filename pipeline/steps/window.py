"""window: recent translations (and in-flight work) by digest, in the worker's dedup table."""

from __future__ import annotations

from typing import ClassVar, Protocol

from pipeline.steps.base import Batch, Fields, Item, TransientError
from pipeline.storage.cache import CachedTranslation


class DedupWindow(Protocol):
    """Recent translations by digest; a Faust windowed table in the worker.

    Both methods raise :class:`TransientError` when the table cannot be read
    or written (changelog, partitions): that is never the request's fault.
    """

    def get(self, item: Item) -> CachedTranslation | None: ...

    def put(self, item: Item, value: CachedTranslation) -> None: ...


class WindowLookup:
    """Answers unanswered items from the dedup window.

    Reads: ``digest``. Sets: ``translation`` and ``cache="window"``.
    Raises: :class:`TransientError` (table unavailable).
    """

    reads: ClassVar[Fields] = frozenset({"digest"})
    sets: ClassVar[Fields] = frozenset({"translation", "cache"})

    in_canary: ClassVar[bool] = False  # the table is read through the consumed event of each item

    def __init__(self, window: DedupWindow) -> None:
        self._window = window

    async def __call__(self, batch: Batch) -> None:
        for item in batch.unanswered():
            try:
                found = self._window.get(item)
            except TransientError:
                raise
            except Exception as exc:
                raise TransientError(f"dedup window read failed: {exc}") from exc
            if found is not None:
                item.translation, item.cache = found, "window"
