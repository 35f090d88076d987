"""The worker's offset book, connected to its Faust consumer.

``admit`` filters each fetched batch through :class:`~pipeline.kafka.offsets.OffsetLedger`
(contiguous per partition, starting at the group's committed offset; a skip
is sought back), ``done`` marks a batch's records finished once their outputs
are acknowledged, and a background task commits the positions that moved.
Rebalances start a new epoch: the finished work is committed while the
partitions are still ours, then the book is cleared.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence

import faust
from faust.types import TP
from kafka import KafkaAdminClient, KafkaConsumer

from pipeline.kafka.check import admin_client
from pipeline.kafka.clients import kafka_python_options
from pipeline.kafka.offsets import OffsetLedger, Ticket, TopicPartition, Verdict
from pipeline.settings import KafkaSettings
from workers.faust_adapter import Event, commit_offsets, tp_of

log = logging.getLogger(__name__)


class OffsetKeeper:
    """Admits events in offset order, and commits only what is done."""

    def __init__(
        self,
        app: faust.App,
        kafka: KafkaSettings,
        group: str,
        commit_interval_s: float,
        log_probe_timeout_s: float,
    ) -> None:
        self._app = app
        self._kafka = kafka
        self._group = group
        self._interval = commit_interval_s
        self.ledger = OffsetLedger()
        self._wanted = asyncio.Event()
        self._lock = asyncio.Lock()
        self._probe = LogProbe(kafka, log_probe_timeout_s)
        self._admin: KafkaAdminClient | None = None
        self._admin_lock = threading.Lock()
        self._last_seek: dict[TopicPartition, float] = {}
        # partitions are checked for skips and stalls at twice the commit pace (at least 1 s)
        self.reseek_s = max(1.0, 2 * commit_interval_s)
        # an idle partition with records past the owed offset for this long was skipped
        self._stall_s = 5 * self.reseek_s
        self._stalled: dict[TopicPartition, tuple[int, float]] = {}
        self.seeks = 0
        self.replays_dropped = 0

    # -- the agents' side ------------------------------------------------------

    async def admit(self, events: Sequence[Event]) -> tuple[list[Event], list[Ticket]]:
        """The events to process now (in order, none skipped) and their tickets."""
        unknown = {tp_of(e) for e in events if not self.ledger.knows(tp_of(e))}
        if unknown and not await self._start(unknown):
            # Rebalanced meanwhile: these events belong to the old assignment. The
            # new one starts at the committed offsets, and a skip is sought back.
            log.info("rebalanced while starting partitions; %d fetched events dropped", len(events))
            return [], []
        admitted: list[Event] = []
        tickets: list[Ticket] = []
        for event in events:
            tp, offset = tp_of(event), event.message.offset
            verdict, ticket = self.ledger.offer(tp, offset)
            if verdict is Verdict.SEEK:
                verdict, ticket = await self._resolve_skip(tp, offset)
            elif verdict is Verdict.STALE:
                await self._reseek_if_due(tp)
            if ticket is not None:
                admitted.append(event)
                tickets.append(ticket)
            elif verdict is Verdict.REPLAY:
                self.replays_dropped += 1
        return admitted, tickets

    def done(self, tickets: list[Ticket]) -> None:
        """These records' outputs are acknowledged: their offsets may be committed."""
        self.ledger.done(tickets)
        self._wanted.set()

    async def _resolve_skip(self, tp: TopicPartition, seen: int) -> tuple[Verdict, Ticket | None]:
        """Offset ``seen`` arrived while an earlier one is owed: a gap in the log, or a skip.

        The log itself tells: when its first record at or after the owed offset
        is later than that, the records in between do not exist (compaction,
        transaction markers, retention) and the cursor moves on; otherwise the
        consumer skipped them, and the partition is sought back to refetch them.
        """
        owed = self.ledger.owed(tp)
        first = await asyncio.to_thread(self._probe.first_offset, tp, owed)
        if first is not None and first > owed:
            log.info(
                "%s[%d]: the log has no records in [%d, %d); continuing at %d",
                tp.topic,
                tp.partition,
                owed,
                first,
                first,
            )
            self.ledger.skip_to(tp, first)
            verdict, ticket = self.ledger.offer(tp, seen)
            if ticket is not None:
                return verdict, ticket
        target = self.ledger.owed(tp)
        log.warning(
            "%s[%d]: the consumer skipped to offset %d while %d was owed; seeking back to %d",
            tp.topic,
            tp.partition,
            seen,
            target,
            target,
        )
        await self._seek(tp)
        return Verdict.STALE, None

    async def _seek(self, tp: TopicPartition) -> None:
        # Faust's fetch loop may still be delivering records fetched before the
        # seek, and each moves its read position past the refetched ones, which
        # it then drops; so the seek is repeated until the owed record arrives.
        self.seeks += 1
        self._last_seek[tp] = time.monotonic()
        try:
            await self._app.consumer.seek_wait({TP(tp.topic, tp.partition): self.ledger.owed(tp)})
        except Exception as exc:  # revoked meanwhile, or the broker is away: retried later
            log.info("%s[%d]: seek not done now (%s); retrying", tp.topic, tp.partition, exc)

    async def _reseek_if_due(self, tp: TopicPartition) -> None:
        if time.monotonic() - self._last_seek.get(tp, 0.0) >= self.reseek_s:
            await self._seek(tp)

    async def check_stalls(self, inputs: list[TopicPartition], idle: bool) -> None:
        """While idle, a partition whose log end stays past the owed offset was skipped.

        A skip is seen when a later record arrives; one at the tail of the log
        (or at start, before any record) reveals itself only this way. Checked
        only while no batch runs, so a busy worker is never sought back.
        """
        if not idle or not inputs:
            self._stalled.clear()
            return
        unknown = [tp for tp in inputs if not self.ledger.knows(tp)]
        try:
            if unknown and not await self._start(unknown):
                return
            ends = await self._app.consumer.highwaters(
                *(TP(tp.topic, tp.partition) for tp in inputs)
            )
        except Exception as exc:  # the broker is away (a restart): checked again next time
            log.info("stall check not done now (%s); checking again later", exc)
            return
        now, owed_all = time.monotonic(), self.ledger.owed_all()
        for tp in inputs:
            owed, end = owed_all.get(tp), ends.get(TP(tp.topic, tp.partition))
            if owed is None or end is None or end <= owed:
                self._stalled.pop(tp, None)
                continue
            since_owed, since = self._stalled.setdefault(tp, (owed, now))
            if since_owed != owed:
                self._stalled[tp] = (owed, now)
            elif now - since >= self._stall_s:
                log.warning(
                    "%s[%d]: idle with records %d..%d unconsumed; seeking back to %d",
                    tp.topic,
                    tp.partition,
                    owed,
                    end - 1,
                    owed,
                )
                self._stalled.pop(tp)
                await self._seek(tp)

    async def reseek_overdue(self) -> None:
        """Seek again every partition whose refetch has not arrived in time."""
        for tp in self.ledger.refetching():
            await self._reseek_if_due(tp)

    async def _start(self, tps: Iterable[TopicPartition]) -> bool:
        """Start partitions at the group's committed offsets; False if rebalanced meanwhile."""
        epoch = self.ledger.epoch
        starts = await self._starting_offsets(tps)
        if self.ledger.epoch != epoch:
            return False
        for tp, offset in starts.items():
            # the agents and the stall timer both start partitions lazily: one that
            # the other started during this lookup may have taken records already,
            # and starting it again would rewind it (every record since, twice)
            if not self.ledger.knows(tp):
                self.ledger.start(tp, offset)
        return True

    async def _starting_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offset of each partition, or the log start when none."""
        wanted = list(tps)
        committed = await asyncio.to_thread(self.committed_offsets, wanted)
        missing = [tp for tp in wanted if tp not in committed]
        if missing:
            earliest = await self._app.consumer.earliest_offsets(
                *(TP(tp.topic, tp.partition) for tp in missing)
            )
            for tp in missing:
                committed[tp] = earliest[TP(tp.topic, tp.partition)]
        return committed

    def committed_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (those it has), from the brokers. Blocks."""
        from kafka import TopicPartition as KafkaTP

        with self._admin_lock:  # one admin client, used from executor threads in turn
            if self._admin is None:
                self._admin = admin_client(self._kafka, "offsets")
            try:
                found = self._admin.list_group_offsets(
                    {self._group: [KafkaTP(tp.topic, tp.partition) for tp in tps]}
                )[self._group]
            except Exception:
                # kafka-python (3.0.12) caches the group's coordinator and never forgets
                # it: once the coordinator moves (a broker restart, the leader rebalance
                # after it), every call fails with NotCoordinatorError and the worker
                # cannot start a partition again. A new client looks the coordinator up.
                self._drop_admin()
                raise
        return {
            TopicPartition(tp.topic, tp.partition): meta.offset
            for tp, meta in found.items()
            if meta.offset is not None and meta.offset >= 0
        }

    def _drop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    # -- committing ------------------------------------------------------------

    async def commit(self) -> bool:
        """Commit every position that moved; one commit at a time. False if it did not go.

        A commit that fails (the broker away) is logged and tried again at the
        next interval: nothing is lost by committing later, only re-delivered.
        """
        async with self._lock:
            offsets = self.ledger.to_commit()
            if not offsets:
                return True
            try:
                done = await commit_offsets(self._app, offsets)
            except Exception as exc:
                log.warning("commit not done now (%s); trying again", exc)
                return False
            if done:
                self.ledger.committed(offsets)
            return done

    async def run(self) -> None:
        """Commit soon after batches finish, at most once per interval; repeat overdue seeks.

        (A background task.)
        """
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), self.reseek_s)
            self._wanted.clear()
            await self.commit()
            await self.reseek_overdue()
            await asyncio.sleep(self._interval)

    # -- rebalances ------------------------------------------------------------

    async def on_revoked(self) -> None:
        """Before the partitions go: commit what is done, then start a new epoch."""
        try:
            await self.commit()
        finally:
            self.ledger.reset()

    def on_assigned(self) -> None:
        self.ledger.reset()

    def close(self) -> None:
        """Release the admin client and the log probe (the worker is stopping). Blocks."""
        with self._admin_lock:
            self._drop_admin()
        self._probe.close()


class LogProbe:
    """Reads the log directly (its own consumer, no group) to see which offsets exist."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float) -> None:
        self._kafka = kafka
        self._timeout_s = timeout_s
        self._consumer: KafkaConsumer | None = None
        self._lock = threading.Lock()

    def first_offset(self, tp: TopicPartition, offset: int) -> int | None:
        """Offset of the first record at or after ``offset`` (None: none yet). Blocks."""
        with self._lock:  # agents probe from executor threads; one consumer, in turn
            return self._first_offset(tp, offset)

    def _first_offset(self, tp: TopicPartition, offset: int) -> int | None:
        from kafka import TopicPartition as KafkaTP

        if self._consumer is None:
            self._consumer = KafkaConsumer(
                **kafka_python_options(self._kafka, "log-probe"),
                group_id=None,
                enable_auto_commit=False,
                max_poll_records=1,
            )
        consumer, ktp = self._consumer, KafkaTP(tp.topic, tp.partition)
        consumer.assign([ktp])
        start = consumer.beginning_offsets([ktp])[ktp]
        if offset < start:
            return int(start)  # deleted by retention
        if offset >= consumer.end_offsets([ktp])[ktp]:
            return None
        consumer.seek(ktp, offset)
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=1).values():
                if records:
                    return int(records[0].offset)
        return None

    def close(self) -> None:
        """Close the probe's consumer; a later probe opens a new one. Blocks."""
        with self._lock:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                consumer.close()
