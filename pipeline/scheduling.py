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
import inspect
import itertools
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

INTERACTIVE = 0
BULK = 1


class PriorityGate:
    """An async mutex whose waiters are served by priority."""

    def __init__(self) -> None:
        self._busy = False
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def run(self, priority: int, work: Awaitable[T]) -> T:
        """Run ``work`` (an engine call) while holding the gate.

        The engine call runs in an executor thread, which cancelling the
        awaiting task does not stop. So when the caller is cancelled (a
        rebalance, a stop), the gate stays held until the call has really
        returned: the next engine call never overlaps a running one.
        """
        try:
            await self._acquire(priority)
        except asyncio.CancelledError:
            if inspect.iscoroutine(work):
                work.close()  # never started: nothing runs, nothing to wait for
            raise
        task = asyncio.ensure_future(work)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                self._release()
            else:
                task.add_done_callback(self._release_after)
            raise
        except BaseException:
            self._release()
            raise
        self._release()
        return result

    def _release_after(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
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
