"""The windowed dedup table, seen through the chain's ``DedupWindow`` protocol."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from faust.streams import _current_event
from faust.types import EventT

from pipeline.cache import CachedTranslation
from pipeline.chain import WorkItem


@contextmanager
def _as_current(event: EventT) -> Iterator[None]:
    # Faust tables write their changelog to the partition of the *current*
    # event. In a take_events() batch that is the last event buffered, so set
    # it to the event that carries this digest: the entry then lives on the
    # partition the digest hashes to, and survives restarts via its changelog.
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


class FaustDedupWindow:
    """Recent translations by digest, in a tumbling windowed Faust table.

    An entry is found for at least one and at most two window lengths after
    it was written (current window, then the previous one).
    """

    def __init__(self, table: Any, window_s: float) -> None:
        self._table = table.relative_to_now()
        self._window_s = window_s
        self._events: dict[str, EventT] = {}

    def bind(self, events: Mapping[str, EventT]) -> None:
        """Digest -> the event carrying it, for the batch about to be processed."""
        self._events = dict(events)

    def get(self, item: WorkItem) -> CachedTranslation | None:
        with _as_current(self._events[item.digest]):
            window_set = self._table[item.digest]
            for read in (window_set.now, lambda: window_set.delta(self._window_s)):
                value = read()
                if value:
                    return CachedTranslation(**value)
        return None

    def put(self, item: WorkItem, value: CachedTranslation) -> None:
        with _as_current(self._events[item.digest]):
            self._table[item.digest] = {
                "text": value.text,
                "model": value.model,
                "input_tokens": value.input_tokens,
                "output_tokens": value.output_tokens,
            }
