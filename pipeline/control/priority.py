"""Engine access by priority: interactive batches before bulk batches.

The engine runs as many calls at once as it has replicas (CTranslate2's
``inter_threads``: two on a CPU of two cores or more, one on a GPU), so whoever
waits for a replica next matters. ``PriorityGate`` hands a free
replica to the waiter with the lowest priority number, first come first
served within a priority. A running bulk call is never interrupted; it is
bounded in time by the bulk take size. With two replicas or more, bulk holds
all but one of them, so a bulk call in progress never delays interactive
work: the replica it leaves free is interactive's (``bench interference``).

A gate may be held (:class:`HoldFile`): while it is, no call starts, and the
waiters are served in priority order once it is released. Tests and drills hold
it to control timing: what arrives meanwhile is read ahead and waits together.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

INTERACTIVE = 0
BULK = 1


class HoldFile:
    """Holds the gate while a file exists (``engine.hold_file``): a hold that another
    process (a test, a drill) sets and releases by creating and removing the file."""

    def __init__(self, path: Path, poll_s: float = 0.05) -> None:
        self.path = path
        self._poll_s = poll_s

    def active(self) -> bool:
        return self.path.exists()

    async def released(self) -> None:
        """Return once the hold is released."""
        while self.active():
            await asyncio.sleep(self._poll_s)


class PriorityGate:
    """An async semaphore of engine replicas whose waiters are served by priority.

    ``replicas`` calls may hold the gate at once; bulk at most ``replicas - 1``
    of them when there are two or more (one when there is one).
    """

    def __init__(self, replicas: int = 1, hold: HoldFile | None = None) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {replicas}")
        self._replicas = replicas
        self._bulk_replicas = max(1, replicas - 1)
        self._held: Counter[int] = Counter()
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._hold = hold
        self._watching: asyncio.Task[None] | None = None

    async def run(self, priority: int, work: Awaitable[T]) -> T:
        """Run ``work`` (an engine call) while holding the gate.

        The engine call runs in an executor thread, which cancelling the
        awaiting task does not stop. So when the caller is cancelled (a
        rebalance, a stop), the gate stays held until the call has really
        returned: no more calls overlap than there are replicas.
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
                self._release(priority)
            else:
                task.add_done_callback(lambda t: self._release_after(t, priority))
            raise
        except BaseException:
            self._release(priority)
            raise
        self._release(priority)
        return result

    def _release_after(self, task: asyncio.Future[Any], priority: int) -> None:
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it as never retrieved
        self._release(priority)

    def _may_take(self, priority: int) -> bool:
        """Whether a call of ``priority`` may take a replica now."""
        if self._held_back() or sum(self._held.values()) >= self._replicas:
            return False
        return priority != BULK or self._held[BULK] < self._bulk_replicas

    async def _acquire(self, priority: int) -> None:
        # waiters that may take a free replica were handed one when it freed (_dispatch)
        if self._may_take(priority):
            self._held[priority] += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        self._watch_hold()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(priority)  # we were handed a replica while being cancelled
            raise

    def _held_back(self) -> bool:
        return self._hold is not None and self._hold.active()

    def _watch_hold(self) -> None:
        """While held with waiters, one task waits for the release to serve them."""
        if self._hold is not None and self._watching is None and self._hold.active():
            self._watching = asyncio.ensure_future(self._dispatch_on_release(self._hold))

    async def _dispatch_on_release(self, hold: HoldFile) -> None:
        try:
            await hold.released()
        finally:
            self._watching = None
        self._dispatch()

    def _release(self, priority: int) -> None:
        self._held[priority] -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free replicas to waiters in priority order, skipping bulk beyond its share."""
        passed: list[tuple[int, int, asyncio.Future[None]]] = []
        while self._waiters and sum(self._held.values()) < self._replicas:
            waiter = heapq.heappop(self._waiters)
            priority, _, future = waiter
            if future.done():  # cancelled while waiting
                continue
            if not self._may_take(priority):
                passed.append(waiter)
                continue
            self._held[priority] += 1
            future.set_result(None)
        for waiter in passed:
            heapq.heappush(self._waiters, waiter)
        if self._waiters:
            self._watch_hold()

    @property
    def replicas(self) -> int:
        """Engine calls that may run at once."""
        return self._replicas

    def share(self, priority: int) -> int:
        """Engine calls a caller of ``priority`` may hold at once."""
        return self._bulk_replicas if priority == BULK else self._replicas

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, _, f in self._waiters)
