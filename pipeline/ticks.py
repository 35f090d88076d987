"""Worker heartbeats on ``translate.ticks``: event time that moves while a pair is quiet.

The SLA job's watermark is the newest event time it has seen minus the
lateness, so without traffic it stands still and a quiet pair's last windows
are never emitted. A worker therefore publishes one :class:`~pipeline.messages.Tick`
per pair it serves every ``worker.tick_interval_s`` (from a Faust timer),
carrying its clock; the SLA job reads ticks together with the results and
never counts them as results. With ticks, a window is emitted at most
``lateness + tick interval + 2 triggers + 3 micro-batch run times`` after it
ends.

:class:`TickSource` is the pure part: it makes the records, the caller
produces them. Ticks are keyed by pair id, so one pair's ticks stay in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pipeline.messages import Tick, now_ms
from pipeline.pairs import TICKS_TOPIC

TickRecord = tuple[str, bytes, bytes]
"""(topic, key, value) of one tick, ready for a producer's ``send``."""


class TickSource:
    """The tick records of one worker: one per served pair, stamped with ``clock()``.

    ``clock`` returns epoch milliseconds (the same clock the worker stamps
    ``completed_at`` with, so ticks and results share one event-time axis).
    """

    def __init__(
        self,
        pairs: Iterable[str],
        worker_name: str,
        clock: Callable[[], int] = now_ms,
        topic: str = TICKS_TOPIC,
    ) -> None:
        self.pairs = tuple(sorted(set(pairs)))
        self.worker = worker_name
        self.topic = topic
        self._clock = clock

    def records(self) -> list[TickRecord]:
        """One record per served pair, all with the same timestamp (none without pairs)."""
        emitted_at = self._clock()
        return [
            (
                self.topic,
                pair.encode(),
                Tick(worker=self.worker, pair=pair, emitted_at=emitted_at).to_json(),
            )
            for pair in self.pairs
        ]
