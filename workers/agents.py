"""How an agent consumes its topic: first come first served, or fair rounds.

:func:`plain_agent` runs each fetched take in order, as micro-batches of the
batch shaper's size; :func:`fair_agent` fetches into per-tenant queues that a
second task serves in deficit-round-robin rounds. Both hand batches to the
:class:`~workers.shell.WorkerShell` and keep as many in flight as the engine's
replicas can use.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from faust.types import StreamT

from pipeline.contract.pairs import Pair
from pipeline.control.fairness import DeficitRoundRobin, FairRounds, RoundPace
from pipeline.kafka.offsets import Ticket
from pipeline.observability import metrics
from pipeline.steps.base import AgentCues
from pipeline.steps.batch_runner import BatchRunner
from workers.control import Held, held_of
from workers.dedup_table import FaustDedupWindow
from workers.faust_adapter import (
    micro_batches,
)
from workers.inflight import HandOffHook, InFlight
from workers.shell import WorkerShell

log = logging.getLogger(__name__)


def plain_agent(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    take: int,
    wait_s: float,
    batch_size: Callable[[], int] | None = None,
    priority: int | None = None,
) -> Callable[[StreamT[Any]], Awaitable[None]]:
    """First come, first served: each fetched take runs in order, as micro-batches of
    ``batch_size()`` (the batch shaper's current size; default: the whole take).
    ``priority``: the engine priority of the agent's batches (None: they use no engine).

    Each micro-batch is a batch of its own in flight, so a take larger than the
    shaper's size keeps every replica busy instead of running its parts one
    after the other. More waiting (a full take, or the rest of this one) lets
    the next batch start as this one's last engine call does (it would take a
    full batch then too), not only once that call is over.
    """
    depth = shell.ctx.settings.worker.in_flight(shell.ctx.gate.replicas)

    def batch(
        admitted: Sequence[Any], tickets: list[Ticket], more_waiting: bool
    ) -> Callable[[HandOffHook], Awaitable[None]]:
        async def work(hand_off: HandOffHook) -> None:
            # with more waiting, the next batch may start as this one's last call does
            cues = AgentCues(hand_off, hand_off) if more_waiting else AgentCues(hand_off)
            await shell.process(admitted, tickets, runner, window, cues)

        return work

    async def consume(stream: StreamT[Any]) -> None:
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(depth, group, _announcer(shell, priority))
            async for events in micro_batches(stream, take, wait_s):
                await in_flight.ready()
                admitted, tickets = await shell.admit(events)
                full = len(events) >= take
                while admitted:
                    size = max(1, batch_size()) if batch_size is not None else len(admitted)
                    rest = size < len(admitted)
                    in_flight.launch(batch(admitted[:size], tickets[:size], full or rest))
                    admitted, tickets = admitted[size:], tickets[size:]
                    if rest:
                        await in_flight.ready()

    return consume


def fair_agent(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    take: int,
    topic: str,
    batch_size: Callable[[], int] | None = None,
    max_round_s: float | None = None,
    sort_window: int = 1,
    count_tokens: Callable[[str, Pair], int] | None = None,
    priority: int | None = None,
) -> Callable[[StreamT[Any]], Awaitable[None]]:
    """Fetch continuously into per-tenant queues; a second task runs the rounds.

    ``max_round_s`` bounds a lone tenant's rounds (:class:`~pipeline.control.fairness.RoundPace`);
    ``sort_window`` lets them take requests of similar length rather than strictly the
    oldest, in tokens when ``count_tokens`` is given (counted off the event loop).

    Held events are admitted (their offsets owed) but not done, so nothing past
    the oldest of them is committed; events of an assignment that was revoked
    meanwhile are dropped when their round comes (the new owner reads them).
    """
    s = shell.ctx.settings
    tenants = s.tenants

    async def held(admitted: Sequence[Any], tickets: list[Ticket]) -> list[Held]:
        def measure() -> list[Held]:
            return [held_of(e, t, count_tokens) for e, t in zip(admitted, tickets, strict=True)]

        return measure() if count_tokens is None else await asyncio.to_thread(measure)

    async def consume(stream: StreamT[Any]) -> None:
        rounds: FairRounds[Held] = FairRounds(
            DeficitRoundRobin(
                tenant_of=lambda h: h.tenant,
                cost_of=lambda h: h.chars,
                weight_of=tenants.weight,
                quantum=tenants.quantum_chars,
                max_items=take,
                active_s=tenants.active_s,
                sort_window=sort_window,
                length_of=lambda h: h.length,
            ),
            max_held=tenants.max_deferred,
        )
        shell.holding.append(rounds)
        if priority is not None:
            shell.ctx.gate.add_backlog(priority, rounds)
        held_gauge = HeldGauge(topic, rounds)
        server = asyncio.create_task(
            _serve_rounds(
                shell,
                runner,
                window,
                rounds,
                held_gauge,
                batch_size,
                RoundPace(max_round_s),
                _announcer(shell, priority),
            )
        )
        server.add_done_callback(functools.partial(_rounds_ended, shell, topic))
        try:
            async for events in micro_batches(stream, take, s.worker.max_wait_s):
                admitted, tickets = await shell.admit(events)
                if admitted:
                    await rounds.offer(await held(admitted, tickets))
                    # also while every replica is busy and no round is being chosen
                    held_gauge.update()
        finally:
            server.cancel()

    return consume


def _announcer(shell: WorkerShell, priority: int | None) -> Callable[[], HandOffHook] | None:
    """Tells the engine gate of each batch on its way to the engine (none for an agent
    whose batches use no engine)."""
    if priority is None:
        return None
    gate = shell.ctx.gate
    return lambda: gate.coming(priority)


def _rounds_ended(shell: WorkerShell, topic: str, task: asyncio.Task[None]) -> None:
    """The rounds task never ends on its own: a failure there stops the worker (loudly)."""
    if not task.cancelled() and task.exception() is not None:
        log.critical(
            "fair-share rounds of %s failed: %r; stopping the worker (nothing held was committed)",
            topic,
            task.exception(),
        )
        shell.exit_code = shell.exit_code or 1
        shell.request_stop()


class HeldGauge:
    """``babelstream_fair_share_held`` of one topic: what its rounds hold, per tenant;
    tenants seen before and holding nothing now read 0."""

    def __init__(self, topic: str, rounds: FairRounds[Held]) -> None:
        self.topic = topic
        self._rounds = rounds
        self._seen: set[str] = set()

    def update(self) -> None:
        held = self._rounds.held_by_tenant()
        metrics.set_fair_share_held(self.topic, held, self._seen)
        self._seen.update(held)


async def _serve_rounds(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    rounds: FairRounds[Held],
    held_gauge: HeldGauge,
    batch_size: Callable[[], int] | None,
    pace: RoundPace,
    announce: Callable[[], HandOffHook] | None,
) -> None:
    topic = held_gauge.topic

    async def run_round(current: list[Held], cut: bool, hand_off: HandOffHook) -> None:
        started = time.monotonic()
        paced = False

        def handed_off() -> None:
            # a round's pace is its time to the engine's hand-off (once per round)
            nonlocal paced
            if not paced:
                paced = True
                chars = sum(h.chars for h in current)
                pace.handed_off(chars, started, time.monotonic(), measure=cut)
            hand_off()

        def last_call_started() -> None:
            # work is held: the next round may be chosen now and prepare while this call runs
            if len(rounds):
                hand_off()

        await shell.process(
            [h.event for h in current],
            [h.ticket for h in current],
            runner,
            window,
            AgentCues(handed_off, last_call_started),
        )

    async with asyncio.TaskGroup() as group:
        depth = shell.ctx.settings.worker.in_flight(shell.ctx.gate.replicas)
        in_flight = InFlight(depth, group, announce)
        while True:
            # choose the round only when it may start: as late as possible, for fairness
            await in_flight.ready()
            limit = pace.max_chars()
            # a round is one micro-batch of the shaper's current size: cut later into
            # parts run one after the other, it would leave a replica idle meanwhile
            chosen = await rounds.next_round(limit, batch_size() if batch_size else None)
            metrics.set_fair_share_round_limit(topic, limit)
            # only a round that was cut (work stayed held) shows a full round's pace: one
            # that took everything held was smaller, and per text a smaller batch is slower
            cut = len(rounds) > 0
            current = [h for h in chosen if h.ticket.epoch == shell.offsets.ledger.epoch]
            if current:
                in_flight.launch(functools.partial(run_round, current, cut))
            held_gauge.update()
