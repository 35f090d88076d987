"""Worker heartbeats on ``translate.ticks``: event time that moves while pairs are quiet.

The SLA job's watermark is the newest event time it has seen (results and
ticks, all pairs) minus the lateness, so without traffic it stands still and
a quiet pair's last windows are never emitted. A worker therefore publishes
one :class:`~pipeline.contract.messages.Tick` every ``worker.tick_interval_s`` (from
a Faust timer), carrying its clock; the SLA job reads ticks together with the
results and never counts them as results. The watermark is one for every
pair, so one tick a worker moves it for all of them: a worker serving 39,800
pairs of one multilingual model ticks as often as one serving a single pair.
With ticks, a window is emitted at most ``lateness + tick interval + 2
triggers + 3 micro-batch run times`` after it ends.

:class:`TickSource` is the pure part: it makes the record, the caller
produces it. Ticks are keyed by worker, so one worker's ticks stay in order.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.contract.messages import Tick, now_ms
from pipeline.contract.pairs import TICKS_TOPIC

TickRecord = tuple[str, bytes, bytes]
"""(topic, key, value) of one tick, ready for a producer's ``send``."""


class TickSource:
    """The tick record of one worker, stamped with ``clock()``.

    ``clock`` returns epoch milliseconds (the same clock the worker stamps
    ``completed_at`` with, so ticks and results share one event-time axis);
    ``pair`` is one pair the worker serves (the tick's series; ticks count in no
    window's figures).
    """

    def __init__(
        self,
        pair: str,
        worker_name: str,
        clock: Callable[[], int] = now_ms,
        topic: str = TICKS_TOPIC,
    ) -> None:
        self.pair = pair
        self.worker = worker_name
        self.topic = topic
        self._clock = clock

    def record(self) -> TickRecord:
        """This worker's tick, stamped now."""
        tick = Tick(worker=self.worker, pair=self.pair, emitted_at=self._clock())
        return (self.topic, self.worker.encode(), tick.to_json())
