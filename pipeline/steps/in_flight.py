"""Texts the batches in flight are translating, so one text is translated once.

Both engine steps (plain text and the fidelity layer) translate through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from cachetools import LRUCache

from pipeline.steps.base import Item
from pipeline.storage.cache import CachedTranslation

# Translates a batch's items in place: sets ``translation`` or ``error`` on each.
ItemsTranslator = Callable[[list[Item]], Awaitable[None]]


class InFlightTexts:
    """The texts an agent's batches are translating right now, or did lately, by digest.

    An agent runs more than one batch at a time (``worker.batches_in_flight``),
    so a batch's lookups can come while an earlier batch still translates the
    same text, before the dedup window has it. Such an item waits for that
    translation (cache level ``window``, as the window would have answered)
    instead of computing it again; if the earlier batch's translation failed
    or was abandoned, the item is translated with its own batch after all.

    A batch's lookups can also come before an earlier batch *stored* a text
    it has already translated (the window is written in the store step, and
    a slow cache lookup, Redis being away, can hold a batch between its window
    lookup and the engine for seconds). So the last ``recent`` translations
    stay here, and answer such items the same way.
    """

    def __init__(self, recent: int) -> None:
        """``recent``: how many settled translations stay to answer later batches."""
        self._pending: dict[str, asyncio.Future[CachedTranslation | None]] = {}
        self._recent: LRUCache[str, CachedTranslation] = LRUCache(maxsize=recent)

    async def translate(self, todo: Sequence[Item], translate: ItemsTranslator) -> None:
        """``translate`` what no batch in flight is translating; wait for the rest."""
        loop = asyncio.get_running_loop()
        mine: list[Item] = []
        waits: list[tuple[Item, asyncio.Future[CachedTranslation | None]]] = []
        owned: dict[str, tuple[Item, asyncio.Future[CachedTranslation | None]]] = {}
        for item in todo:
            done = self._recent.get(item.digest) if item.digest else None
            if done is not None:
                item.translation, item.cache = done, "window"
                continue
            pending = self._pending.get(item.digest) if item.digest else None
            if pending is not None:
                waits.append((item, pending))
                continue
            mine.append(item)
            if item.digest and item.digest not in owned:
                future = self._pending[item.digest] = loop.create_future()
                owned[item.digest] = (item, future)

        def settle(_: asyncio.Future[None]) -> None:
            # once the engine is done with this batch's texts, whatever its waits: so a
            # waiter never waits on another waiter
            for digest, (item, future) in owned.items():
                if self._pending.get(digest) is future:
                    del self._pending[digest]
                translation = item.translation if item.error is None else None
                if translation is not None:
                    self._recent[digest] = translation
                future.set_result(translation)

        own = asyncio.ensure_future(translate(mine))
        own.add_done_callback(settle)
        answers = asyncio.gather(*(asyncio.shield(future) for _, future in waits))
        await asyncio.gather(own, answers)
        leftovers = []
        for (item, _), found in zip(waits, answers.result(), strict=True):
            if found is None:
                leftovers.append(item)
            else:
                item.translation, item.cache = found, "window"
        if leftovers:
            await translate(leftovers)
