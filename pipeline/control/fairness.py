"""Per-tenant fair share inside a pair: deficit round robin over held work.

A pair's work topic is one FIFO per partition, so a tenant that sends 10,000
requests at once would make everyone behind it wait for all of them. The
translation agent therefore reads ahead (holding fetched requests, not yet
committed) and lets :class:`DeficitRoundRobin` choose what goes into each
engine round: every tenant with held work gets a share of the round in
proportion to its weight, in characters, so a steady tenant's request goes
into the next round whatever the flood in front of it.

Delivery is unchanged: a held request is neither resolved nor acknowledged,
and offsets are committed only up to the oldest request not yet published on
each partition (Faust commits the first gap-free run of acknowledged
offsets), so a crash re-delivers everything held. Per-tenant order is kept,
with one exception that pays for itself in engine time: a lone tenant's round
takes its oldest held request together with the requests nearest to it in
length among its next ``sort_window`` (an engine call pads every text to its
longest, so a round of similar lengths wastes little), so a request may be
answered before older requests of its tenant. The oldest request always goes
into the next round, so none waits longer than the requests before it take.

A running round cannot be interrupted, so a tenant that starts sending while
another floods alone waits for the round in progress: a lone tenant's rounds
are cut at about ``tenants.max_round_s`` of run time (:class:`RoundPace`,
from the measured pace of the agent's own rounds), never shorter than one full
engine call (:func:`lone_round_s`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from pipeline.engine.costs import CostModel

T = TypeVar("T")


class DeficitRoundRobin(Generic[T]):
    """Held items per tenant, handed out in rounds by deficit round robin (Shreedhar-Varghese).

    A pass visits the tenants with held items in rotating order: each visit
    adds ``quantum * weight`` to the tenant's deficit and takes its oldest
    items while their cost (characters) fits in the deficit, up to
    ``max_items`` per round. A tenant whose queue empties forgets its deficit,
    so an idle tenant banks nothing.

    While two or more tenants are *active* (sent something in the last
    ``active_s`` seconds), a round is one pass: the engine is never
    interrupted, so a short round is what bounds how long a steady tenant's
    request waits behind a flooding one. A lone tenant's rounds are filled
    up to ``max_items`` (nobody waits behind them yet), or until their cost
    reaches the ``max_cost`` the caller passes (so whoever comes next does not
    wait for a long one); with ``sort_window`` above 1 a lone tenant's round
    is its oldest item and those nearest to it in ``length_of`` (default: the
    cost) among its oldest ``sort_window``, in queue order. When a pass takes nothing
    (every head item costs more than its tenant's deficit so far), passes
    repeat, so a round is never empty while items are held.
    """

    def __init__(
        self,
        *,
        tenant_of: Callable[[T], str],
        cost_of: Callable[[T], int],
        weight_of: Callable[[str], float],
        quantum: int,
        max_items: int,
        active_s: float = 5.0,
        sort_window: int = 1,
        length_of: Callable[[T], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if quantum < 1 or max_items < 1 or sort_window < 1:
            raise ValueError("quantum, max_items and sort_window must be at least 1")
        self._tenant_of = tenant_of
        self._cost_of = cost_of
        self._weight_of = weight_of
        self._quantum = quantum
        self._max_items = max_items
        self._active_s = active_s
        self._sort_window = sort_window
        self._length_of = length_of or cost_of
        self._clock = clock
        self._queues: dict[str, deque[T]] = {}  # insertion order = rotation order
        self._deficits: dict[str, float] = {}
        self._last_seen: dict[str, float] = {}
        self._held = 0

    def offer(self, items: Iterable[T]) -> None:
        """Hold fetched items (in fetch order) until a round takes them."""
        for item in items:
            tenant = self._tenant_of(item)
            queue = self._queues.get(tenant)
            if queue is None:
                queue = self._queues[tenant] = deque()
                self._deficits[tenant] = 0.0
            queue.append(item)
            self._held += 1
            self._last_seen[tenant] = self._clock()

    def next_round(self, max_cost: float | None = None, max_items: int | None = None) -> list[T]:
        """The items of the next engine round (empty only when nothing is held).

        ``max_cost`` bounds a lone tenant's round (it may pass it by one
        quantum); with two or more active tenants a round is one pass anyway.
        ``max_items`` lowers this round's item cap below the constructor's (the
        batch size an adaptive controller asks for now).
        """
        cap = max(1, min(self._max_items, self._max_items if max_items is None else max_items))
        crowded = self.active_tenants() > 1
        if not crowded and self._sort_window > 1 and len(self._queues) == 1:
            return self._similar_round(max_cost, cap)
        chosen: list[T] = []
        cost = 0
        while self._held and (
            not chosen
            or (not crowded and len(chosen) < cap and (max_cost is None or cost < max_cost))
        ):
            cost += self._pass(chosen, cap)
        return chosen

    def _similar_round(self, max_cost: float | None, cap: int) -> list[T]:
        """A lone tenant's round: its oldest item and the nearest in length among the window.

        The window's items sorted by length, the round grows from the oldest item
        to whichever sorted neighbour widens its length range least, until it
        reaches ``cap`` items or its cost ``max_cost``; it goes out in queue order.
        """
        tenant, queue = next(iter(self._queues.items()))
        window = list(itertools.islice(queue, self._sort_window))
        lengths = [self._length_of(item) for item in window]
        by_length = sorted(range(len(window)), key=lambda i: (lengths[i], i))
        low = high = by_length.index(0)
        total = max(1, self._cost_of(window[0]))
        last = len(by_length) - 1
        while high - low < min(cap - 1, last) and (max_cost is None or total < max_cost):
            widen_low = lengths[by_length[high]] - lengths[by_length[low - 1]] if low else None
            widen_high = (
                lengths[by_length[high + 1]] - lengths[by_length[low]] if high < last else None
            )
            if widen_high is None or (widen_low is not None and widen_low <= widen_high):
                low -= 1
                total += max(1, self._cost_of(window[by_length[low]]))
            else:
                high += 1
                total += max(1, self._cost_of(window[by_length[high]]))
        taken = set(by_length[low : high + 1])
        chosen = [item for i, item in enumerate(window) if i in taken]
        rest = [item for i, item in enumerate(window) if i not in taken]
        rest.extend(itertools.islice(queue, len(window), None))
        self._held -= len(chosen)
        if rest:
            self._queues[tenant] = deque(rest)
            self._deficits[tenant] = 0.0  # alone, it has nobody's share to bank against
        else:
            del self._queues[tenant]
            del self._deficits[tenant]
        return chosen

    def active_tenants(self) -> int:
        """Tenants with held items or a request in the last ``active_s`` seconds."""
        horizon = self._clock() - self._active_s
        for tenant in [t for t, seen in self._last_seen.items() if seen < horizon]:
            if tenant not in self._queues:
                del self._last_seen[tenant]
        return len(self._last_seen)

    def _pass(self, chosen: list[T], cap: int) -> int:
        """One visit to each tenant with held items, ``chosen`` growing to at most ``cap``
        items; returns the cost it added to ``chosen``."""
        taken = 0
        for tenant in list(self._queues):
            if len(chosen) >= cap:
                break
            queue = self._queues[tenant]
            deficit = self._deficits[tenant] + self._quantum * self._weight_of(tenant)
            while queue and len(chosen) < cap:
                cost = max(1, self._cost_of(queue[0]))
                if cost > deficit:
                    break
                deficit -= cost
                taken += cost
                chosen.append(queue.popleft())
                self._held -= 1
            # Rotate: the tenant just served goes to the back of the order.
            del self._queues[tenant]
            if queue:
                self._queues[tenant] = queue
                self._deficits[tenant] = deficit
            else:
                del self._deficits[tenant]
        return taken

    def remove(self, drop: Callable[[T], bool]) -> list[T]:
        """Take every held item for which ``drop`` is true out (e.g. of revoked partitions)."""
        dropped: list[T] = []
        for tenant in list(self._queues):
            queue = self._queues[tenant]
            kept = deque(item for item in queue if not drop(item))
            dropped.extend(item for item in queue if drop(item))
            if kept:
                self._queues[tenant] = kept
            else:
                del self._queues[tenant]
                del self._deficits[tenant]
        self._held -= len(dropped)
        return dropped

    def __len__(self) -> int:
        return self._held

    def held_by_tenant(self) -> dict[str, int]:
        """Items held per tenant (for metrics)."""
        return {tenant: len(queue) for tenant, queue in self._queues.items()}


# A request's length in tokens when sizing "one full engine call" (a short sentence).
TYPICAL_TOKENS = 32


def lone_round_s(max_round_s: float | None, cost: CostModel, token_budget: int) -> float | None:
    """How long a lone tenant's round may run: ``max_round_s``, or one full engine call
    (``token_budget`` tokens of typical requests, by the pair's cost model) if that is
    longer, since a shorter round would give up batching the planner would have used.
    ``None``: no bound (rounds fill to the batch size)."""
    if max_round_s is None:
        return None
    calls = max(1, token_budget // TYPICAL_TOKENS)
    return max(max_round_s, cost.seconds(calls, TYPICAL_TOKENS))


class RoundPace:
    """The characters a round may hold to run about ``round_s``, from the pace of past rounds.

    The pace (characters per second, an exponentially weighted mean over
    rounds) includes everything a round does, lookups and publishing too.
    Until a round has been measured, or with ``round_s`` ``None``, rounds are
    not bounded.
    """

    def __init__(self, round_s: float | None, smoothing: float = 0.3) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self._round_s = round_s
        self._smoothing = smoothing
        self.chars_per_s: float | None = None
        self._engine_free_s = float("-inf")  # when the last round handed off the engine

    def handed_off(self, chars: int, started_s: float, now_s: float, *, measure: bool) -> None:
        """A round started at ``started_s`` handed off the engine at ``now_s``.

        Its time counts from when the engine was free for it: a round started
        during the last one's final call (the agent starts the next round then
        when work is held) waited for that call first. ``measure``: whether the
        round shows the pace (one that was cut, not one that took all there was).
        """
        began = max(started_s, self._engine_free_s)
        self._engine_free_s = now_s
        if measure:
            self.observe(chars, now_s - began)

    def observe(self, chars: int, seconds: float) -> None:
        """One round of ``chars`` characters ran ``seconds``."""
        if chars <= 0 or seconds <= 0:
            return
        pace = chars / seconds
        previous = self.chars_per_s
        self.chars_per_s = (
            pace if previous is None else previous + self._smoothing * (pace - previous)
        )

    def max_chars(self) -> float | None:
        """The bound for the next round's characters (``None``: unbounded)."""
        if self._round_s is None or self.chars_per_s is None:
            return None
        return self._round_s * self.chars_per_s


class FairRounds(Generic[T]):
    """Work held between the agent that fetches it and the task that runs engine rounds.

    The agent keeps fetching while rounds run, so a steady tenant's request
    is seen (and served in the next round) however deep the flood before it
    in the partition. :meth:`offer` waits while ``max_held`` items are held:
    then nothing more is fetched until rounds drain them.
    """

    def __init__(self, rounds: DeficitRoundRobin[T], max_held: int) -> None:
        self._rounds = rounds
        self._max_held = max(1, max_held)
        self._changed = asyncio.Condition()

    async def offer(self, items: Sequence[T]) -> None:
        """Hold ``items`` (waits first while the holding is full)."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._rounds) < self._max_held)
            self._rounds.offer(items)
            self._changed.notify_all()

    async def next_round(
        self, max_cost: float | None = None, max_items: int | None = None
    ) -> list[T]:
        """The next round's items (waits until something is held)."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self._rounds) > 0)
            chosen = self._rounds.next_round(max_cost, max_items)
            self._changed.notify_all()
            return chosen

    async def remove(self, drop: Callable[[T], bool]) -> list[T]:
        """Take held items out (they will not run; their offsets stay uncommitted)."""
        async with self._changed:
            dropped = self._rounds.remove(drop)
            self._changed.notify_all()
            return dropped

    def __len__(self) -> int:
        return len(self._rounds)

    def held_by_tenant(self) -> dict[str, int]:
        return self._rounds.held_by_tenant()
