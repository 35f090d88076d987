"""An agent's micro-batches in flight: the next one starts when the last hands off the engine.

A micro-batch spends the end of its run waiting on Redis and Kafka (stores,
publishing, the broker's acknowledgements), not on the engine. Run one batch
at a time and the engine idles through all of that; :class:`InFlight` lets
the agent start its next batch as soon as the last one has handed off
(:class:`~pipeline.steps.handoff.HandOff`), so the next batch's lookups and
engine calls overlap the last one's publishing. At most ``depth`` batches are
in flight, so a batch stuck retrying (a broker away) holds the agent back
instead of letting batches pile up behind it.

Order and delivery do not change: each batch is admitted in order and marked
done when its outputs are acknowledged, and offsets are committed only up to
the oldest batch not yet done (the offset book keeps them contiguous).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

# What a batch calls once it no longer needs the engine (idempotent).
HandOffHook = Callable[[], None]


class InFlight:
    """Starts an agent's batches in ``group``, at most ``depth`` at once, each after the
    previous one handed off (``depth`` 1: one batch at a time, start to end).

    ``announce`` is called as each batch starts, and what it returns once that batch
    hands off (the engine gate counts the batches on their way to it:
    :meth:`~pipeline.control.priority.PriorityGate.coming`).
    """

    def __init__(
        self,
        depth: int,
        group: asyncio.TaskGroup,
        announce: Callable[[], HandOffHook] | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, not {depth}")
        self._depth = depth
        self._group = group
        self._running = 0
        self._launched = 0  # batches launched so far: the latest one's number
        self._last_handed_off = True
        self._may_start = asyncio.Event()
        self._may_start.set()
        self._announce = announce

    async def ready(self) -> None:
        """Wait until a batch may start: a free slot, and the last batch handed off.

        Only the agent that owns this starts batches, so once ready it stays
        ready until its next :meth:`launch`, whatever it awaits in between.
        """
        await self._may_start.wait()

    def launch(self, work: Callable[[HandOffHook], Awaitable[None]]) -> None:
        """Start ``work(hand_off)``; call after :meth:`ready`. Ending, or failing, hands off."""
        if not self._may_start.is_set():
            raise RuntimeError("launch() before ready(): no free slot, or the last batch runs")
        self._running += 1
        self._launched += 1
        number = self._launched
        self._last_handed_off = False
        self._update()
        arrived = self._announce() if self._announce is not None else None

        def hand_off() -> None:
            if arrived is not None:
                arrived()
            # only the latest batch holds the next one back (an older one retrying does not)
            if number == self._launched:
                self._last_handed_off = True
            self._update()

        async def run() -> None:
            try:
                await work(hand_off)
            finally:
                self._running -= 1
                hand_off()

        self._group.create_task(run())

    def _update(self) -> None:
        if self._running < self._depth and self._last_handed_off:
            self._may_start.set()
        else:
            self._may_start.clear()
