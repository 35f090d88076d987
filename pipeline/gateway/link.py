"""The gateway process's link to Kafka: one producer, one reply topic, waiters by request id.

Each gateway process owns one reply topic
(``<replies.prefix>gateway.<instance>.<process>``, kept: a restarted
process finds it again) and reads it from the offset its group committed
last, so results that arrived while it was down are read too. A result
whose caller still waits resolves that caller's future; any other (its
caller got a 504, or the process restarted since) goes to the
:class:`~pipeline.gateway.call_store.ResultStore`, fetchable by id. Offsets are
committed only after those results are stored.

The brokers are probed with a TCP connection every
``gateway.probe_interval_s``: while they do not answer, a call fails at
once (503 with ``Retry-After``) instead of waiting for a client timeout,
and sends already waiting for acknowledgements fail as soon as the probe
finds the brokers gone; a produce not acknowledged within
``gateway.produce_timeout_s`` (overloaded brokers) fails the same way. If
Kafka is down when the gateway starts, it serves 503s and connects as soon
as the brokers answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from pipeline.contract.messages import Headers, TranslationRequest, TranslationResult
from pipeline.contract.pairs import GATEWAY_REPLY_LABEL, REQUESTS_TOPIC
from pipeline.gateway.call_store import ResultStore
from pipeline.kafka.clients import aiokafka_options
from pipeline.kafka.reachability import split_address
from pipeline.kafka.reply_topics import ReplyTopic
from pipeline.settings import Settings

log = logging.getLogger(__name__)

# job ids of /translate_file jobs: their results are read by the job itself
FILE_JOB_PREFIX = "gwfile-"
_COMMIT_EVERY_S = 1.0


class KafkaUnavailable(Exception):
    """Kafka cannot take a request now; the caller should retry after ``retry_after_s``."""

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


def reply_topic_name(settings: Settings, instance: str, process: int) -> str:
    """The reply topic of one gateway process."""
    return f"{settings.replies.prefix}{GATEWAY_REPLY_LABEL}.{instance}.{process}"


@dataclass
class Waiters:
    """Futures of the results callers wait for, shared by calls that retry the same id."""

    futures: dict[str, asyncio.Future[TranslationResult]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # ids whose results are also stored while awaited: a caller that named its request id
    # may fetch it after a restart, when no process is left to answer it
    durable: set[str] = field(default_factory=set)

    def expect(
        self, request_ids: Sequence[str], *, durable: bool = False
    ) -> tuple[list[asyncio.Future[TranslationResult]], list[bool]]:
        """A future per id, and whether each is new (an id already awaited is not sent again)."""
        loop = asyncio.get_running_loop()
        futures, new = [], []
        if durable:
            self.durable.update(request_ids)
        for rid in request_ids:
            future = self.futures.get(rid)
            new.append(future is None)
            if future is None:
                future = self.futures[rid] = loop.create_future()
            self.counts[rid] = self.counts.get(rid, 0) + 1
            futures.append(future)
        return futures, new

    def release(self, request_ids: Sequence[str]) -> None:
        """A caller stops waiting: an id nobody waits for any more is forgotten."""
        for rid in request_ids:
            left = self.counts.get(rid, 0) - 1
            if left > 0:
                self.counts[rid] = left
            else:
                self.counts.pop(rid, None)
                self.futures.pop(rid, None)
                self.durable.discard(rid)

    def resolve(self, result: TranslationResult) -> bool:
        """Hand a result to its waiting callers; True when it must be stored as well
        (nobody waits for it, or its caller named its request id)."""
        future = self.futures.get(result.request_id)
        if future is None:
            return True
        if not future.done():  # the first result of an id wins
            future.set_result(result)
        return result.request_id in self.durable

    def __len__(self) -> int:
        return len(self.futures)


@dataclass
class LinkStats:
    """Counters of one process, for ``babelstream status`` and the bench."""

    produced: int = 0
    results: int = 0
    stored_results: int = 0
    dropped_results: int = 0
    unavailable: int = 0
    started_at: float = field(default_factory=time.time)


class KafkaLink:
    """Producer, reply consumer and broker probe of one gateway process."""

    def __init__(
        self, settings: Settings, reply_topic: str, group_id: str, store: ResultStore
    ) -> None:
        self._settings = settings
        self.reply_topic = reply_topic
        self._group_id = group_id
        self._store = store
        self.waiters = Waiters()
        self.stats = LinkStats()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reachable = False
        self.problem: str | None = "not connected yet"
        self._tasks: list[asyncio.Task[None]] = []
        self._connected = asyncio.Event()
        self._down = asyncio.Event()

    @property
    def available(self) -> bool:
        """Whether a call may be produced now."""
        return self._reachable and self._producer is not None and self._connected.is_set()

    async def start(self) -> None:
        """Probe, then connect in the background (retrying while Kafka is down)."""
        self._reachable = bool(await self._probe())
        if not self._reachable:
            self._down.set()
        self._tasks = [
            asyncio.create_task(self._probe_loop(), name="gateway-probe"),
            asyncio.create_task(self._connect_and_consume(), name="gateway-replies"),
        ]

    async def wait_connected(self, timeout_s: float) -> bool:
        """Wait until the producer and reply consumer are up (tests, the bench)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        return self._connected.is_set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()

    async def _probe(self) -> bool | None:
        """True: a broker accepts connections; False: every one refuses; None: some did not
        answer in time (a busy event loop can look the same, so one such probe decides
        nothing)."""
        gateway, kafka = self._settings.gateway, self._settings.kafka
        problems = []
        silent = False
        for address in kafka.bootstrap_servers.split(","):
            host, port = split_address(address, 9092)
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), gateway.probe_interval_s
                )
            except TimeoutError:
                silent = True
                problems.append(f"{address}: no answer")
                continue
            except OSError as exc:
                problems.append(f"{address}: {exc.strerror or exc}")
                continue
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
        self.problem = "Kafka is not reachable (" + "; ".join(problems) + ")"
        return None if silent else False

    async def _probe_loop(self) -> None:
        interval = self._settings.gateway.probe_interval_s
        silent_before = False
        while True:
            await asyncio.sleep(interval)
            found = await self._probe()
            if found is None and not silent_before:
                silent_before = True  # no answer twice in a row counts as down
                continue
            silent_before = False
            reachable = bool(found)
            if reachable != self._reachable:
                log.warning("Kafka %s", "reachable again" if reachable else f"down: {self.problem}")
            self._reachable = reachable
            if reachable:
                self._down.clear()
            else:
                self._down.set()  # sends waiting for acknowledgements fail now

    async def _connect(self) -> None:
        kafka = self._settings.kafka
        await asyncio.to_thread(
            ReplyTopic(kafka, self._settings.replies, self.reply_topic, ephemeral=False).create
        )
        producer = AIOKafkaProducer(
            **aiokafka_options(kafka, "gateway"),
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
        )
        consumer = AIOKafkaConsumer(
            **aiokafka_options(kafka, "gateway-replies"),
            group_id=self._group_id,
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        try:
            await producer.start()
            await consumer.start()
            partitions = consumer.partitions_for_topic(self.reply_topic) or {0}
            tps = [TopicPartition(self.reply_topic, p) for p in sorted(partitions)]
            consumer.assign(tps)
            # from the committed offset (a restart), else the end; committed at once, so a
            # process that dies before its first commit resumes from here, not the end
            positions = {tp: await consumer.position(tp) for tp in tps}
            await consumer.commit(positions)
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            with contextlib.suppress(Exception):
                await consumer.stop()
            raise
        self._producer, self._consumer = producer, consumer

    async def _connect_and_consume(self) -> None:
        interval = self._settings.gateway.probe_interval_s
        while self._producer is None:
            try:
                if self._reachable:
                    await self._connect()
                    break
            except (KafkaError, OSError) as exc:
                self.problem = f"cannot connect to Kafka: {exc}"
                log.warning("gateway: %s; retrying", self.problem)
            await asyncio.sleep(interval)
        self.problem = None
        self._connected.set()
        log.info("gateway: producing to %s, replies on %s", REQUESTS_TOPIC, self.reply_topic)
        await self._consume()

    async def _consume(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        last_commit = time.monotonic()
        dirty = False
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            except KafkaError as exc:
                log.warning("gateway: reading replies failed (%s); retrying", exc)
                await asyncio.sleep(self._settings.gateway.probe_interval_s)
                continue
            late: list[TranslationResult] = []
            for records in batches.values():
                for record in records:
                    try:
                        result = TranslationResult.from_json(record.value)
                    except ValidationError:
                        log.warning("gateway: skipping malformed result at %s", record.offset)
                        continue
                    self.stats.results += 1
                    if self.waiters.resolve(result) and not (result.job_id or "").startswith(
                        FILE_JOB_PREFIX
                    ):
                        late.append(result)
            if late:
                await self._keep(late)  # before the commit: at least once
            dirty = dirty or bool(batches)
            if dirty and time.monotonic() - last_commit >= _COMMIT_EVERY_S:
                try:
                    await consumer.commit()
                    dirty, last_commit = False, time.monotonic()
                except KafkaError as exc:
                    log.warning("gateway: committing reply offsets failed: %s", exc)

    async def _keep(self, results: list[TranslationResult]) -> None:
        """Store results nobody waits for; Redis failing, a few tries, then they are dropped
        (counted and logged: they stay on translate.results) so waiting calls go on."""
        for attempt in range(3):
            try:
                await self._store.keep_results(results)
                self.stats.stored_results += len(results)
                return
            except (redis.RedisError, OSError) as exc:
                problem = exc
                await asyncio.sleep(0.2 * (attempt + 1))
        self.stats.dropped_results += len(results)
        log.error("gateway: %d results could not be kept (Redis: %s)", len(results), problem)

    async def submit(self, requests: Sequence[TranslationRequest], headers: Headers) -> None:
        """Produce ``requests`` and wait for the brokers' acknowledgements.

        Raises :class:`KafkaUnavailable` at once while the brokers do not
        answer (also for sends already waiting when the probe finds them
        gone), or when the acknowledgements do not come within
        ``gateway.produce_timeout_s`` (brokers overloaded).
        """
        gateway = self._settings.gateway
        producer = self._producer
        if not self._reachable or producer is None or not self._connected.is_set():
            self.stats.unavailable += 1
            raise KafkaUnavailable(self.problem or "Kafka is not reachable", gateway.retry_after_s)

        async def send_all() -> None:
            sent = [
                await producer.send(
                    REQUESTS_TOPIC,
                    value=request.to_json(),
                    key=request.pair.id.encode(),
                    headers=headers,
                )
                for request in requests
            ]
            await asyncio.gather(*sent)

        sending = asyncio.ensure_future(send_all())
        went_down = asyncio.ensure_future(self._down.wait())
        done, _ = await asyncio.wait(
            {sending, went_down},
            timeout=gateway.produce_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        went_down.cancel()
        problem: str | None = None
        if sending in done:
            error = sending.exception()
            problem = None if error is None else f"Kafka did not take the request ({error})"
        else:
            sending.cancel()
            problem = (
                self.problem or "Kafka is not reachable"
                if went_down in done
                else "Kafka did not acknowledge the request in time"
            )
        if problem is not None:
            self.stats.unavailable += 1
            raise KafkaUnavailable(problem, gateway.retry_after_s)
        self.stats.produced += len(requests)
