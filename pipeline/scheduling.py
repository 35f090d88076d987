"""Engine access by priority: interactive batches before bulk batches.

The engine runs one batch at a time (it already uses every core it is given),
so whoever waits for it next matters. ``PriorityGate`` hands the engine to the
waiter with the lowest priority number, first come first served within a
priority. A running bulk batch is never interrupted; it is bounded by the
bulk take size, which bounds how long interactive work can wait.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

INTERACTIVE = 0
BULK = 1


class PriorityGate:
    """An async mutex whose waiters are served by priority."""

    def __init__(self) -> None:
        self._busy = False
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @asynccontextmanager
    async def hold(self, priority: int) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if not self._busy and not self._waiters:
            self._busy = True
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # we were handed the gate while being cancelled
            raise

    def _release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._busy = False

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, _, f in self._waiters)
