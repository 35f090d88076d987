"""The Faust application: a router agent plus translation agents per served model.

Faust is the shell: it runs the consumer group, takes micro-batches and serves
the web pages. Each agent hands its batch to a :class:`WorkerShell`, which
admits the records through the offset book (in order, none skipped), runs
them through the agent's steps (``pipeline/steps/``: composed in
:func:`translation_steps` and :func:`routing_steps`), and marks them done
once every output is acknowledged by the broker; only then can their offsets
be committed. Faust's own acking is off for the topics we consume.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TP as FaustTP
from faust.types import StreamT

from pipeline.contract.messages import SlaWindow
from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, bulk_work_topic, work_topic
from pipeline.control.fairness import DeficitRoundRobin, FairRounds, RoundPace, lone_round_s
from pipeline.control.priority import BULK, INTERACTIVE, PriorityGate
from pipeline.detect import Detection
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.costs import cost_of
from pipeline.engine.registry import ModelEntry
from pipeline.engine.shaping import BatchShaper
from pipeline.engine.translator import Translator
from pipeline.errors import EXIT_TEMPFAIL
from pipeline.fidelity.service import FidelityService
from pipeline.kafka.clients import faust_app_options
from pipeline.kafka.groups import AssignmentCheck
from pipeline.kafka.offsets import Ticket, TopicPartition
from pipeline.kafka.records import Outgoing
from pipeline.observability import metrics
from pipeline.routing import Router
from pipeline.settings import Settings
from pipeline.sla.dashboard.server import SlaFeed
from pipeline.sla.ticks import TickSource
from pipeline.steps.base import Batch, RetryBudgetExhausted, TransientError
from pipeline.steps.chains import routing_steps, translation_steps
from pipeline.steps.isolation import canary_record
from pipeline.steps.publish import Producer
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.runner import BatchRunner, RetryPolicy
from pipeline.steps.translate import EngineRunner
from pipeline.storage.cache import TwoLevelCache
from workers.control import Controls, Held, held_of
from workers.dedup import FaustDedupWindow
from workers.faust_adapter import (
    MembershipLease,
    assigned_partitions,
    coordination_failure,
    micro_batches,
    record_of,
    tp_of,
    use_idempotent_producer,
)
from workers.inflight import HandOffHook, InFlight
from workers.offsets import OffsetKeeper
from workers.producer import FaustProducer
from workers.stats import WorkerStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """A model this worker translates with (every pair it serves), and its engine.

    ``model`` names its work topics; ``model_id`` (the model and its weights'
    fingerprint) is what cache digests and results name.
    """

    model: ModelEntry
    model_id: str
    translator: Translator
    compute_type: str = "unknown"

    @property
    def name(self) -> str:
        return self.model.model_id


@dataclass
class WorkerContext:
    """What the agents share: settings, caches, the engine gate and counters."""

    settings: Settings
    cache: TwoLevelCache
    worker_name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    gate: PriorityGate = field(default_factory=PriorityGate)
    stats: WorkerStats = field(default_factory=WorkerStats)
    # markup, placeholders and glossaries (pipeline/fidelity); None: plain text only
    fidelity: FidelityService | None = None


class WorkerShell:
    """What every agent does with a fetched micro-batch, and the worker's lifecycle state."""

    def __init__(
        self, app: faust.App, ctx: WorkerContext, offsets: OffsetKeeper, producer: Producer
    ) -> None:
        self.app = app
        self.ctx = ctx
        self.offsets = offsets
        self.producer = producer
        self.draining = False
        self.exit_code = 0
        self.joined = False
        self.lease = MembershipLease(ctx.settings.worker.session_timeout_s)
        self._lapse_logged = False
        self._lease_poll_s = ctx.settings.worker.session_timeout_s / 20
        # set by the process that runs the worker: stop the worker (drain first)
        self.request_stop: Callable[[], None] = lambda: None
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._never = asyncio.Event()
        # the topics the agents consume (not Faust's changelog or leader topics)
        self.sources: set[str] = set()
        # each translation agent's batch shaper, by its topic
        self.shapers: dict[str, BatchShaper] = {}
        # each agent's runner (its health: batches failing, requests set apart), by name
        self.runners: dict[str, BatchRunner] = {}
        # the fair-share agents' held events (Sized: how many wait for a round)
        self.holding: list[Sized] = []
        # what the worker consumes, and per topic the partitions no member of the group
        # holds (checked after each assignment, then every worker.group_check_s): while
        # any are, some served pair has no one to serve it. None: not checked yet.
        self.subscription: list[str] = []
        self.unassigned: dict[str, int] | None = None

    def input_partitions(self) -> list[TopicPartition]:
        """Assigned partitions of the topics the agents consume."""
        return sorted(tp for tp in assigned_partitions(self.app) if tp.topic in self.sources)

    async def admit(self, events: Sequence[Any]) -> tuple[list[Any], list[Ticket]]:
        """The fetched events to process, in order (through the offset book), and tickets."""
        if self.draining:
            await self._never.wait()  # stopping: take nothing more, commit nothing more
        try:
            return await self.offsets.admit(events)
        except Exception as exc:
            # The group's offsets could not be read (broker away). Dropping these events is
            # safe: nothing was taken, and the offset book seeks back when it sees the gap.
            log.warning(
                "could not admit %d events (%s); they will be fetched again", len(events), exc
            )
            await asyncio.sleep(self.ctx.settings.worker.retry_initial_s)
            return [], []

    async def process(
        self,
        admitted: Sequence[Any],
        tickets: list[Ticket],
        runner: BatchRunner,
        window: FaustDedupWindow | None = None,
        on_hand_off: HandOffHook | None = None,
        on_last_call: HandOffHook | None = None,
    ) -> None:
        """Run one micro-batch of admitted events through the steps; mark it done
        (committable) once published.

        ``on_hand_off`` is called when the batch is done with the engine,
        ``on_last_call`` when its last engine call gets the engine.
        """
        if not admitted:
            return
        if self.draining:
            await self._never.wait()
        if not await self._member_of(tickets[0].epoch):
            return  # the partitions moved: their new owner reads these records again
        if window is not None:
            window.bind(admitted)
        tps = {tp_of(e) for e in admitted}
        paused: set[FaustTP] = set()

        async def pause_while_retrying(_exc: BaseException, _sleep: float) -> None:
            # Backpressure: fetch nothing more for these partitions until the batch is through.
            paused.update(FaustTP(tp.topic, tp.partition) for tp in tps)
            self.app.consumer.pause_partitions(paused)

        self._enter()
        try:
            await runner.run(
                [record_of(e) for e in admitted],
                on_retry=pause_while_retrying,
                on_hand_off=on_hand_off,
                on_last_call=on_last_call,
            )
        except RetryBudgetExhausted as exc:
            await self._fatal(exc)
        finally:
            self._leave()
            if window is not None:
                window.unbind(admitted)
            if paused and not self.app.rebalancing:
                self.app.consumer.resume_partitions(paused)
        self.offsets.done(tickets)

    async def _member_of(self, epoch: int) -> bool:
        """Wait while the group may have evicted us; False once the assignment changed.

        A worker cut off from the brokers keeps fetched records, and once the cut
        heals it could process and publish them before its next heartbeat tells
        it that its partitions went to another worker (which answered them).
        """
        while self.lease.lapsed_s > 0 and self.offsets.ledger.epoch == epoch:
            if not self._lapse_logged:
                self._lapse_logged = True
                log.warning(
                    "no heartbeat answered for over the session timeout: the group may "
                    "have given our partitions to another worker; holding fetched records "
                    "until it confirms our membership or reassigns them"
                )
            await asyncio.sleep(self._lease_poll_s)
        self._lapse_logged = False
        return self.offsets.ledger.epoch == epoch

    @property
    def idle(self) -> bool:
        """No batch is being processed right now, and no fair-share agent holds fetched
        events for a later round (with a backlog those wait there, fetched but not yet
        taken: not a partition that stalled)."""
        return self._busy == 0 and not any(len(rounds) for rounds in self.holding)

    def _enter(self) -> None:
        self._busy += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._busy -= 1
        if not self._busy:
            self._idle.set()

    async def _fatal(self, exc: RetryBudgetExhausted) -> None:
        log.critical(
            "giving up: %s; exiting so the group moves these partitions to a "
            "healthy worker (nothing was committed past them)",
            exc,
        )
        self.exit_code = exc.exit_code
        self.request_stop()
        await self._never.wait()

    async def drain(self) -> None:
        """Stop taking batches, let the running ones finish, commit them; bounded."""
        self.draining = True
        bound = self.ctx.settings.worker.stop_timeout_s / 2
        try:
            await asyncio.wait_for(self._idle.wait(), bound)
        except TimeoutError:
            log.warning(
                "stopping with %d batches unfinished after %.0fs: they are not "
                "committed and will be processed again",
                self._busy,
                bound,
            )
        if await self.offsets.commit():
            log.info("drained: finished batches committed")
        else:
            log.warning("drained, but not committed: the finished batches will be processed again")

    def stalled(self) -> dict[str, dict[str, object]]:
        """Agents whose current batch has been failing for over ``worker.stall_report_s``."""
        bound = self.ctx.settings.worker.stall_report_s
        return {
            name: runner.health.as_dict()
            for name, runner in self.runners.items()
            if runner.health.failing_for_s() > bound
        }

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, details) for the readiness page and the ready gauge."""
        stalled = self.stalled()
        reason = (
            "stopping"
            if self.draining
            else "joining the group"
            if not self.joined
            else "rebalancing"
            if self.app.rebalancing
            else "recovering tables"
            if not self.app.tables.actives_ready
            else "checking the group's assignment"
            if self.unassigned is None and self.subscription
            else "partitions no member of the group holds: "
            + ", ".join(f"{t} ({n})" for t, n in sorted(self.unassigned.items()))
            if self.unassigned
            else "batches failing: "
            + "; ".join(
                f"{name} for {h['failing_s']}s (attempt {h['attempts']}, {h['error']}, "
                f"first record {h['first_record']})"
                for name, h in stalled.items()
            )
            if stalled
            else None
        )
        details: dict[str, Any] = {
            "ready": reason is None,
            "worker": self.ctx.worker_name,
            "group": self.app.conf.id,
            # grows on every revocation and assignment: a drill that sees it change
            # knows the group rebalanced, and uncommitted work was read again
            "epoch": self.offsets.ledger.epoch,
        }
        isolated = {n: r.health.isolated for n, r in self.runners.items() if r.health.isolated}
        if isolated:
            details["isolated"] = isolated
        if stalled:
            details["stalled"] = stalled
        if reason is not None:
            details["reason"] = reason
            return False, details
        assigned: dict[str, list[int]] = {}
        for tp in self.input_partitions():
            assigned.setdefault(tp.topic, []).append(tp.partition)
        details["assigned"] = assigned
        return True, details


def create_app(
    ctx: WorkerContext,
    served: Sequence[ServedModel],
    deployment: Callable[[Pair], str | None],
    detect: Callable[[str, str], Detection] | None = None,
    *,
    app_id: str = "babelstream",
    with_router: bool = True,
    instance_id: str | None = None,
    web_port: int | None = None,
) -> tuple[faust.App, WorkerShell]:
    """Build the Faust app and its shell.

    ``deployment`` gives the model id serving a pair anywhere in the deployment
    (the router forwards to models that other worker groups serve), or None;
    ``detect`` the source language of a text towards a target (requests sent
    with ``source_lang: auto``); ``served`` are the models this process
    translates with.
    """
    s = ctx.settings
    w = s.worker
    datadir = w.data_dir / app_id / (instance_id or "dynamic")
    datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust makes only the last level
    app = faust.App(
        app_id,
        **faust_app_options(s.kafka),  # brokers and, when secured, credentials
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=s.kafka.work_partitions,
        topic_replication_factor=s.kafka.replication_factor,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=instance_id,
        broker_session_timeout=w.session_timeout_s,
        broker_heartbeat_interval=w.session_timeout_s / 3,
        datadir=str(datadir),
        web_port=w.web_port if web_port is None else web_port,
        web_bind=w.web_host,
        web_host=w.web_host,
        web_enabled=True,
    )
    use_idempotent_producer(app)
    offsets = OffsetKeeper(app, s.kafka, app_id, w.commit_interval_s)
    producer = FaustProducer(app, w.produce_timeout_s)
    shell = WorkerShell(app, ctx, offsets, producer)
    policy = RetryPolicy(w.retry_initial_s, w.retry_max_s, w.retry_budget_s)
    controls = Controls.from_settings(s)
    replies = controls.reply_copies

    def source(name: str) -> faust.TopicT:
        # acks off: offsets are committed by the shell's offset book, not by Faust
        shell.sources.add(name)
        shell.subscription.append(name)
        return app.topic(name, key_type=bytes, value_type=bytes, acks=False)

    if with_router:
        router = Router(
            deployment,
            s.limits,
            worker=ctx.worker_name,
            hint=f" in {s.engine.registry} (add a model that serves it: "
            "`babelstream models convert ... --pair SRC_TGT`)",
            detect=detect,
        )
        probe_pair = next((m.model.any_entry().pair for m in served), Pair("en", "de"))
        runner = BatchRunner(
            routing_steps(
                router=router,
                limits=s.limits,
                quarantine=controls.quarantine,
                control_wait_s=w.control_ready_wait_s,
                producer=producer,
                totals=ctx.stats,
                replies=replies,
            ),
            functools.partial(Batch.of, model_id="", worker=ctx.worker_name),
            policy,
            limits=s.limits,
            canary=functools.partial(
                canary_record, REQUESTS_TOPIC, probe_pair, w.canary_for(probe_pair.source)
            ),
            quarantine=controls.quarantine,
            producer=producer,
            name="router",
        )
        shell.runners["router"] = runner

        # The ingress is one FIFO per pair too: a flood routed first come first served
        # would hold back everyone else's requests before they reach the work topics.
        route = (
            _fair_agent(shell, runner, None, w.max_messages, REQUESTS_TOPIC)
            if s.tenants.fair_share
            else _plain_agent(shell, runner, None, w.max_messages, w.max_wait_s)
        )
        app.agent(source(REQUESTS_TOPIC), name="router", concurrency=1)(route)

    for model in served:
        _add_model_agents(app, shell, model, source, producer, policy, controls, replies)

    _add_lifecycle(app, shell, served)
    _add_controls(app, controls)
    return app, shell


def _add_model_agents(
    app: faust.App,
    shell: WorkerShell,
    served: ServedModel,
    source: Callable[[str], faust.TopicT],
    producer: Producer,
    policy: RetryPolicy,
    controls: Controls,
    replies: ReplyCopies,
) -> None:
    """The interactive and bulk agents of one model: every pair it serves shares them."""
    ctx = shell.ctx
    s, w = ctx.settings, ctx.settings.worker
    model = served.model
    table = app.Table(
        f"dedup-{model.model_id}", default=dict, partitions=s.kafka.work_partitions
    ).tumbling(w.dedup_window_s, expires=2 * w.dedup_window_s)
    probe = model.any_entry().pair
    cost = cost_of(served.translator, probe)
    for priority, topic_name, budget in (
        (INTERACTIVE, work_topic(model.model_id), w.token_budget),
        (BULK, bulk_work_topic(model.model_id), w.bulk_token_budget),
    ):
        # the batch shape: static, or adaptive (interactive); bulk calls bounded in time
        shaper = BatchShaper(
            s,
            model.model_id,
            model.serves,
            cost,
            bulk=priority == BULK,
            replicas=ctx.gate.share(priority),
        )
        shell.shapers[topic_name] = shaper
        # One window adapter per agent: it binds the events of its batches in flight (same table).
        window = FaustDedupWindow(table, w.dedup_window_s)
        engine = EngineRunner(
            served.translator,
            TokenBudgetBatcher(budget),
            ctx.gate,
            priority,
            canary_text=w.canary_for,
            shaper=shaper,
            label=model.model_id,
        )
        steps = translation_steps(
            model=model.model_id,
            serves=model.serves,
            limits=s.limits,
            window=window,
            cache=ctx.cache,
            engine=engine,
            producer=producer,
            totals=ctx.stats,
            compute_type=served.compute_type,
            cancels=controls.cancels,
            quarantine=controls.quarantine,
            control_wait_s=w.control_ready_wait_s,
            quotas=controls.quotas,
            replies=replies,
            recent_translations=w.recent_translations,
            fidelity=ctx.fidelity,
        )
        runner = BatchRunner(
            steps,
            functools.partial(Batch.of, model_id=served.model_id, worker=ctx.worker_name),
            policy,
            limits=s.limits,
            canary=functools.partial(canary_record, topic_name, probe, w.canary_for(probe.source)),
            quarantine=controls.quarantine,
            producer=producer,
            name=topic_name,
        )
        shell.runners[topic_name] = runner
        # Take as much as the shape may ever ask for; the shell cuts it to the current size.
        take = s.batching.adaptive_max_messages if shaper.controller else shaper.knobs.max_messages
        size = lambda shaper=shaper: shaper.knobs.max_messages  # noqa: E731 (read at each cut)
        round_s = lone_round_s(s.tenants.max_round_s, cost, budget)
        agent = (
            _fair_agent(
                shell,
                runner,
                window,
                take,
                topic_name,
                size,
                round_s,
                s.batching.sort_window,
                served.translator.count_tokens,
            )
            if s.tenants.fair_share
            else _plain_agent(shell, runner, window, take, w.max_wait_s, size)
        )
        app.agent(source(topic_name), name=f"translate-{topic_name}", concurrency=1)(agent)


def _plain_agent(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    take: int,
    wait_s: float,
    batch_size: Callable[[], int] | None = None,
) -> Callable[[StreamT[Any]], Awaitable[None]]:
    """First come, first served: each fetched take runs in order, as micro-batches of
    ``batch_size()`` (the batch shaper's current size; default: the whole take).

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
            await shell.process(
                admitted, tickets, runner, window, hand_off, hand_off if more_waiting else None
            )

        return work

    async def consume(stream: StreamT[Any]) -> None:
        async with asyncio.TaskGroup() as group:
            in_flight = InFlight(depth, group)
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


def _fair_agent(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    take: int,
    topic: str,
    batch_size: Callable[[], int] | None = None,
    max_round_s: float | None = None,
    sort_window: int = 1,
    count_tokens: Callable[[str, Pair], int] | None = None,
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
        server = asyncio.create_task(
            _serve_rounds(shell, runner, window, rounds, topic, batch_size, RoundPace(max_round_s))
        )
        server.add_done_callback(functools.partial(_rounds_ended, shell, topic))
        try:
            async for events in micro_batches(stream, take, s.worker.max_wait_s):
                admitted, tickets = await shell.admit(events)
                if admitted:
                    await rounds.offer(await held(admitted, tickets))
        finally:
            server.cancel()

    return consume


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


async def _serve_rounds(
    shell: WorkerShell,
    runner: BatchRunner,
    window: FaustDedupWindow | None,
    rounds: FairRounds[Held],
    topic: str,
    batch_size: Callable[[], int] | None,
    pace: RoundPace,
) -> None:
    seen: set[str] = set()

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
            handed_off,
            last_call_started,
        )

    async with asyncio.TaskGroup() as group:
        in_flight = InFlight(shell.ctx.settings.worker.in_flight(shell.ctx.gate.replicas), group)
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
            held = rounds.held_by_tenant()
            metrics.set_fair_share_held(topic, held, seen)
            seen.update(held)


def _add_controls(app: faust.App, controls: Controls) -> None:
    """The control feed (cancels, quarantine), the quota counters' health, and the reply
    producer's pruning."""
    app.task(controls.feed.run)
    quota_errors = metrics.TotalTracker(metrics.QUOTA_ERRORS)

    @app.timer(interval=controls.sample_interval_s)
    async def sample_quota_errors() -> None:
        quota_errors.update(controls.quotas.errors)

    @app.timer(interval=controls.listing_refresh_s)
    async def prune_reply_producer() -> None:
        try:
            await controls.reply_producer.prune()
        except Exception as exc:  # a listing that failed: next time
            log.warning("could not list reply topics: %s", exc)


def _add_lifecycle(app: faust.App, shell: WorkerShell, served: Sequence[ServedModel]) -> None:
    """Rebalance hooks, the commit task, readiness and stats pages, metric sampling."""
    ctx = shell.ctx
    obs = ctx.settings.observability

    async def on_revoked(_app: Any, revoked: set[FaustTP], **_: Any) -> None:
        await shell.offsets.on_revoked()

    async def on_assigned(_app: Any, assigned: set[FaustTP], **_: Any) -> None:
        shell.offsets.on_assigned()
        shell.unassigned = None  # checked again before the worker says it is ready
        shell.lease.confirm()
        shell.lease.watch(app)
        if not shell.joined:
            shell.joined = True
            log.info(
                "worker %s joined group %s: %d partitions assigned",
                ctx.worker_name,
                app.conf.id,
                len(assigned),
            )

    # Faust's signals pass the sender, the partitions and the signal itself
    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]

    @app.task
    async def commit_offsets() -> None:
        try:
            await shell.offsets.run()
        finally:  # the app stops by cancelling its tasks
            shell.offsets.close()

    if served and ctx.settings.worker.tick_interval_s > 0:
        ticks = TickSource(served[0].model.any_entry().pair.id, ctx.worker_name)

        # Heartbeats, so the SLA job closes quiet pairs' windows (never on translate.results).
        @app.timer(interval=ctx.settings.worker.tick_interval_s)
        async def publish_ticks() -> None:
            with contextlib.suppress(TransientError):  # a missed tick is made up by the next
                topic, key, value = ticks.record()
                await shell.producer.send_all([Outgoing(topic, key, value, [], "tick")])

    adaptive = [shaper for shaper in shell.shapers.values() if shaper.controller]
    if adaptive:
        sla = ctx.settings.sla

        @app.task
        async def follow_sla_windows() -> None:
            """The adaptive controllers' outer loop: the SLA job's windows of their pairs."""

            def to_shapers(window: SlaWindow) -> None:
                for shaper in adaptive:
                    shaper.add(window)

            await SlaFeed(ctx.settings.kafka, sla.sink_topic, 0.0, SlaWindow, to_shapers).run()

    @app.task
    async def announce_ready() -> None:
        while not shell.readiness()[0]:
            await asyncio.sleep(0.2)
        details = shell.readiness()[1]
        log.info(
            "ready: worker %s (group %s) serving %s",
            ctx.worker_name,
            app.conf.id,
            "; ".join(f"{t} {p}" for t, p in details["assigned"].items())
            or "no partitions yet (more workers than partitions)",
        )

    @app.page("/babelstream/ready")
    async def ready_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        ready, details = shell.readiness()
        return web.json(details, status=200 if ready else 503)

    @app.page("/babelstream/stats")
    async def stats_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return web.json(
            {
                **ctx.stats.snapshot(),
                "seeks": shell.offsets.seeks,
                "replays_dropped": shell.offsets.replays_dropped,
            }
        )

    cache_errors = metrics.TotalTracker(metrics.CACHE_ERRORS)
    cache_corrupt = metrics.TotalTracker(metrics.CACHE_CORRUPT)

    # loops, not timers: a round that runs long (a loaded machine, a slow broker) delays
    # the next one instead of overlapping it (and filling the log with mode's warnings)
    async def check_stalls() -> None:
        if shell.readiness()[0]:
            await shell.offsets.check_stalls(shell.input_partitions(), idle=shell.idle)

    async def sample_metrics() -> None:
        metrics.set_worker_ready(shell.readiness()[0])
        for name, runner in shell.runners.items():
            metrics.set_batch_failing(name, runner.health.failing_for_s())
        if ctx.cache.l2 is not None:
            cache_errors.update(ctx.cache.l2.errors)
            cache_corrupt.update(ctx.cache.l2.corrupt)
        await _sample_lag(app, shell)

    assignment = AssignmentCheck(ctx.settings.kafka, app.conf.id)

    async def check_group() -> None:
        failure = coordination_failure(app)
        if failure is not None and not shell.draining:
            log.critical(
                "group coordination ended (%s: %s); exiting so a restarted worker joins again",
                type(failure).__name__,
                failure,
            )
            shell.exit_code = EXIT_TEMPFAIL
            shell.request_stop()
            return
        if shell.joined and shell.subscription:
            shell.unassigned = await asyncio.to_thread(assignment.unassigned, shell.subscription)

    _every(app, shell.offsets.reseek_s, check_stalls)
    _every(app, obs.sample_interval_s, sample_metrics)
    # soon after an assignment (readiness waits for it), then at the configured pace
    group_check_s = ctx.settings.worker.group_check_s
    _every(
        app,
        lambda: min(0.5, group_check_s) if shell.unassigned is None else group_check_s,
        check_group,
    )


def _every(
    app: faust.App, seconds: float | Callable[[], float], work: Callable[[], Awaitable[None]]
) -> None:
    """Run ``work`` every ``seconds`` (a number, or read before each round) for as long as
    the app runs; a round that fails is logged (once per kind of error) and the next one
    runs as usual."""
    failed: set[str] = set()

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds() if callable(seconds) else seconds)
            try:
                await work()
            except Exception as exc:
                kind = type(exc).__name__
                if kind not in failed:
                    failed.add(kind)
                    log.warning("%s failed (%s: %s); trying again", work.__name__, kind, exc)

    loop.__name__ = loop.__qualname__ = work.__name__
    app.task(loop)


async def _sample_lag(app: faust.App, shell: WorkerShell) -> None:
    """Committed-offset lag (log end - committed) per assigned input partition."""
    try:
        inputs = shell.input_partitions()
        if not inputs:
            return
        ends = await app.consumer.highwaters(*(FaustTP(*tp) for tp in inputs))
        committed = await asyncio.to_thread(shell.offsets.committed_offsets, inputs)
        lag = {
            tp: ends[FaustTP(*tp)] - committed.get(tp, 0) for tp in inputs if FaustTP(*tp) in ends
        }
        metrics.set_committed_lag(
            app.conf.id, {(tp.topic, tp.partition): n for tp, n in lag.items()}
        )
        for topic, shaper in shell.shapers.items():
            shaper.lag(sum(n for tp, n in lag.items() if tp.topic == topic))
    except Exception as exc:  # a rebalance in progress; sample again next time
        log.debug("lag sample failed: %s", exc)
