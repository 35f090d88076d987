"""The windowed dedup table, seen through the hot path's ``DedupWindow`` protocol."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pipeline.steps.base import Item
from pipeline.storage.cache import CachedTranslation
from workers.faust_adapter import Event, as_current_event


class FaustDedupWindow:
    """Recent translations by digest, in a tumbling windowed Faust table.

    An entry is found for at least one and at most two window lengths after
    it was written (current window, then the previous one). Each entry is
    written with the event that carries its digest as the current event, so it
    lives on the partition the digest hashes to and survives restarts through
    that partition's changelog. Failures surface as exceptions, which the
    window steps classify as transient.
    """

    def __init__(self, table: Any, window_s: float) -> None:
        self._table = table.relative_to_now()
        self._window_s = window_s
        self._events: dict[tuple[int, int], Event] = {}

    def bind(self, events: Iterable[Event]) -> None:
        """Add the events of a batch about to be processed (up to ``worker.batches_in_flight``
        of an agent's batches are bound at once)."""
        self._events.update({(e.message.partition, e.message.offset): e for e in events})

    def unbind(self, events: Iterable[Event]) -> None:
        """Forget the events of a batch that is through."""
        for e in events:
            self._events.pop((e.message.partition, e.message.offset), None)

    def _event(self, item: Item) -> Event:
        return self._events[(item.record.partition, item.record.offset)]

    def get(self, item: Item) -> CachedTranslation | None:
        with as_current_event(self._event(item)):
            window_set = self._table[item.digest]
            for read in (window_set.now, lambda: window_set.delta(self._window_s)):
                value = read()
                if value:
                    return CachedTranslation(**value)
        return None

    def put(self, item: Item, value: CachedTranslation) -> None:
        with as_current_event(self._event(item)):
            self._table[item.digest] = {
                "text": value.text,
                "model": value.model,
                "input_tokens": value.input_tokens,
                "output_tokens": value.output_tokens,
                "extra": value.extra,
            }
