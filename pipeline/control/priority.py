"""Engine access by priority: interactive batches before bulk batches.

The engine runs as many calls at once as it has replicas (CTranslate2's
``inter_threads``: two on a CPU of two cores or more, one on a GPU), so whoever
waits for a replica next matters. ``PriorityGate`` hands a free
replica to the waiter with the lowest priority number, first come first
served within a priority. A running bulk call is never interrupted; it is
bounded in time by the bulk take size. With two replicas or more, bulk holds
all but one of them, so a bulk call in progress never delays interactive
work: the replica it leaves free is interactive's. And a bulk call does not
start while interactive work is active, for up to ``bulk_yield_max_s``:
beside interactive calls it would take the cores they and the event loop
need. Interactive work is active while it holds or waits for a replica, and
also while it is on its way there: a batch between its start and its hand-off
(:meth:`PriorityGate.coming`; between its lookups and its engine calls there
is no waiter at the gate, and a bulk call started in that gap would run
beside it) and requests an agent holds for later rounds
(:meth:`PriorityGate.add_backlog`).

A gate may be held (:class:`HoldFile`): while it is, no call starts, and the
waiters are served in priority order once it is released. Tests and drills hold
it to control timing: what arrives meanwhile is read ahead and waits together.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sized
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
Clock = Callable[[], float]

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
    of them when there are two or more (one when there is one), and none while
    interactive work is active (it holds, waits for, or is on its way to a
    replica), unless the bulk call has waited ``bulk_yield_max_s`` already.
    """

    def __init__(
        self,
        replicas: int = 1,
        hold: HoldFile | None = None,
        bulk_yield_max_s: float = 1.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, not {replicas}")
        self._replicas = replicas
        self._bulk_replicas = max(1, replicas - 1)
        self._bulk_yield_max_s = bulk_yield_max_s
        self._clock = clock
        self._held: Counter[int] = Counter()
        # (priority, arrival order, when it started waiting, its future)
        self._waiters: list[tuple[int, int, float, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._hold = hold
        self._watching: asyncio.Task[None] | None = None
        # batches on their way to the engine, and work held for later batches, by priority
        self._coming: Counter[int] = Counter()
        self._backlogs: dict[int, list[Sized]] = {}
        # serves a yielding bulk waiter once its yield runs out, if nothing else does first
        self._yield_timer: asyncio.TimerHandle | None = None

    def coming(self, priority: int) -> Callable[[], None]:
        """Count a batch of ``priority`` as on its way to the engine until the returned
        callable is called (once it is done with the engine; idempotent)."""
        self._coming[priority] += 1
        counted = True

        def done() -> None:
            nonlocal counted
            if counted:
                counted = False
                self._coming[priority] -= 1
                self._dispatch()

        return done

    def add_backlog(self, priority: int, held: Sized) -> None:
        """Work of ``priority`` held for later batches (``len(held)``: how much); an agent
        that holds work launches its batch (:meth:`coming`) before ``held`` shrinks."""
        self._backlogs.setdefault(priority, []).append(held)

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

    def _may_take(self, priority: int, waited_s: float = 0.0) -> bool:
        """Whether a call of ``priority`` that has waited ``waited_s`` may take a replica now."""
        if self._held_back() or sum(self._held.values()) >= self._replicas:
            return False
        if priority != BULK:
            return True
        if self._held[BULK] >= self._bulk_replicas:
            return False
        return waited_s >= self._bulk_yield_max_s or not self._interactive_active()

    def _interactive_active(self) -> bool:
        return (
            self._held[INTERACTIVE] > 0
            or self._coming[INTERACTIVE] > 0
            or any(len(held) for held in self._backlogs.get(INTERACTIVE, ()))
            or any(p == INTERACTIVE and not f.done() for p, _, _, f in self._waiters)
        )

    async def _acquire(self, priority: int) -> None:
        # waiters that may take a free replica were handed one when it freed (_dispatch)
        if self._may_take(priority):
            self._held[priority] += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), self._clock(), future))
        self._watch_hold()
        if priority == BULK:
            self._dispatch()  # a bulk call that yields is served when its yield runs out
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
        """Hand free replicas to waiters in priority order, skipping bulk beyond its share
        (or yielding to interactive work)."""
        passed: list[tuple[int, int, float, asyncio.Future[None]]] = []
        now = self._clock()
        yield_left_s: float | None = None
        while self._waiters and sum(self._held.values()) < self._replicas:
            waiter = heapq.heappop(self._waiters)
            priority, _, since, future = waiter
            if future.done():  # cancelled while waiting
                continue
            if not self._may_take(priority, now - since):
                passed.append(waiter)
                if priority == BULK and self._held[BULK] < self._bulk_replicas:
                    left = self._bulk_yield_max_s - (now - since)
                    yield_left_s = left if yield_left_s is None else min(yield_left_s, left)
                continue
            self._held[priority] += 1
            future.set_result(None)
        for waiter in passed:
            heapq.heappush(self._waiters, waiter)
        if self._waiters:
            self._watch_hold()
        if yield_left_s is not None and not self._held_back():
            self._serve_after(yield_left_s)

    def _serve_after(self, delay_s: float) -> None:
        """Dispatch again in ``delay_s``: a bulk waiter's yield may run out while no call
        ends and no batch arrives."""
        if self._yield_timer is not None:
            self._yield_timer.cancel()
        self._yield_timer = asyncio.get_running_loop().call_later(max(0.0, delay_s), self._dispatch)

    @property
    def replicas(self) -> int:
        """Engine calls that may run at once."""
        return self._replicas

    def share(self, priority: int) -> int:
        """Engine calls a caller of ``priority`` may hold at once."""
        return self._bulk_replicas if priority == BULK else self._replicas

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, _, _, f in self._waiters)
