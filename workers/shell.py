"""The worker's shell: what every agent does with a fetched micro-batch.

A :class:`WorkerShell` admits records through the offset book (in order, none
skipped), runs them through an agent's steps, and marks them done once every
output is acknowledged by the broker; only then can their offsets be
committed. It also holds the worker's lifecycle state: draining, readiness,
the exit code and the group membership lease.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TP as FaustTP

from pipeline.control.priority import PriorityGate
from pipeline.control.residency import ModelResidency
from pipeline.engine.registry import ModelEntry
from pipeline.engine.shaping import BatchShaper
from pipeline.engine.translator import Translator
from pipeline.fidelity.service import FidelityService
from pipeline.kafka.offsets import Ticket, TopicPartition
from pipeline.settings import Settings
from pipeline.steps.base import NO_CUES, AgentCues, RetryBudgetExhausted
from pipeline.steps.batch_runner import BatchRunner
from pipeline.steps.publish import Producer
from pipeline.storage.cache import TwoLevelCache
from workers.dedup_table import FaustDedupWindow
from workers.faust_adapter import (
    MembershipLease,
    assigned_partitions,
    record_of,
    tp_of,
)
from workers.offset_keeper import OffsetKeeper
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
    # under a model memory budget: which model's batches go to the engine next
    residency: ModelResidency | None = None
    stats: WorkerStats = field(default_factory=WorkerStats)
    # markup, placeholders and glossaries (pipeline/fidelity); None: plain text only
    fidelity: FidelityService | None = None
    # what the engine runs on (CTranslate2Translator.in_use), shown by readiness and status
    engine: dict[str, Any] = field(default_factory=dict)


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
            admitted, tickets = await self.offsets.admit(events)
        except Exception as exc:
            # The group's offsets could not be read (broker away). Dropping these events is
            # safe: nothing was taken, and the offset book seeks back when it sees the gap.
            log.warning(
                "could not admit %d events (%s); they will be fetched again", len(events), exc
            )
            await asyncio.sleep(self.ctx.settings.worker.retry_initial_s)
            return [], []
        self.ctx.stats.admitted.update(tp_of(e).topic for e in admitted)
        return admitted, tickets

    async def process(
        self,
        admitted: Sequence[Any],
        tickets: list[Ticket],
        runner: BatchRunner,
        window: FaustDedupWindow | None = None,
        cues: AgentCues = NO_CUES,
    ) -> None:
        """Run one micro-batch of admitted events through the steps; mark it done
        (committable) once published.

        ``cues`` tell the agent when the batch is done with the engine and when
        its last engine call gets the engine.
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
                cues=cues,
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
            # where a request's tenant comes from: its ingress topic, or the request itself
            "tenant_from": "topic" if self.ctx.settings.tenants.identity_from_topic else "request",
        }
        if self.ctx.engine:
            details["engine"] = self.ctx.engine
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
