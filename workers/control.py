"""The operator controls in a worker: the control feed, the reply-topic listing, held events.

Every worker needs every cancel and every quarantined record (a request's
partition in the work topics has nothing to do with its cancel's partition),
so the feed is a plain aiokafka consumer with no group, assigned all of
``translate.cancel`` and ``translate.quarantine`` from their start, feeding
the pure :class:`~pipeline.control.cancels.CancelRegistry` and
:class:`~pipeline.control.quarantine.QuarantineRegistry`. The
reply-topic listing backs :class:`~pipeline.kafka.reply_topics.ReplyTopicCheck`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from faust.types import EventT
from kafka import KafkaProducer

from pipeline.contract.messages import tenant_label
from pipeline.contract.pairs import CANCEL_TOPIC, QUARANTINE_TOPIC, Pair
from pipeline.control.cancels import CancelRegistry
from pipeline.control.cancels import apply_record as apply_cancel
from pipeline.control.quarantine import QuarantineRegistry
from pipeline.control.quarantine import apply_record as apply_quarantine
from pipeline.control.quotas import QuotaLimiter
from pipeline.kafka.clients import aiokafka_options, kafka_python_options
from pipeline.kafka.offsets import Ticket
from pipeline.kafka.records import Outgoing
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.observability import metrics
from pipeline.settings import KafkaSettings, Settings
from pipeline.steps.replies import ReplyCopies

log = logging.getLogger(__name__)

RETRY_S = 2.0
# every worker reads these compacted topics whole
CONTROL_TOPICS = (CANCEL_TOPIC, QUARANTINE_TOPIC)


class ControlFeed:
    """Reads the control topics (``translate.cancel``, ``translate.quarantine``) into their
    registries for as long as the worker runs.

    Both registries' ``ready`` turn true once the feed has read every partition
    up to the end offsets it found when it started; until then the cancel and
    quarantine steps hold batches back (a cancel or quarantine published before
    a restart is not missed). A lost connection is retried; the registries keep
    what they have.
    """

    def __init__(
        self, kafka: KafkaSettings, cancels: CancelRegistry, quarantine: QuarantineRegistry
    ) -> None:
        self._kafka = kafka
        self._cancels = cancels
        self._quarantine = quarantine
        self.unreadable = 0

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker went away: read again from the start
                log.warning("control feed interrupted (%s); reconnecting in %.0fs", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)

    def _apply(self, topic: str, key: bytes | None, value: bytes | None) -> bool:
        if topic == CANCEL_TOPIC:
            return apply_cancel(self._cancels, key, value)
        return apply_quarantine(self._quarantine, key, value)

    async def _follow(self) -> None:
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self._kafka, "controls"),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        tps = await self._partitions()
        await consumer.start()
        try:
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            while True:
                batches = await consumer.getmany(timeout_ms=500)
                for tp, records in batches.items():
                    for record in records:
                        if not self._apply(tp.topic, record.key, record.value):
                            self.unreadable += 1
                if not self._cancels.ready and await _caught_up(consumer, ends):
                    self._cancels.ready = self._quarantine.ready = True
                    log.info(
                        "control topics read: %d live cancels, %d quarantined records",
                        len(self._cancels),
                        len(self._quarantine),
                    )
                metrics.CANCELS_KNOWN.set(len(self._cancels))
                metrics.QUARANTINED_KNOWN.set(len(self._quarantine))
        finally:
            await consumer.stop()

    async def _partitions(self) -> list[TopicPartition]:
        admin = AIOKafkaAdminClient(**aiokafka_options(self._kafka, "controls-admin"))
        await admin.start()
        try:
            described = await admin.describe_topics(list(CONTROL_TOPICS))
        finally:
            await admin.close()
        tps = []
        for topic in described:
            if topic.get("error_code") or not topic.get("partitions"):
                raise RuntimeError(f"topic {topic.get('topic')} is not available")
            tps += [TopicPartition(topic["topic"], p["partition"]) for p in topic["partitions"]]
        return sorted(tps)


async def _caught_up(consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return False
    return True


class TopicLister:
    """Lists the cluster's topics with one long-lived aiokafka admin client."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._admin: AIOKafkaAdminClient | None = None

    async def __call__(self) -> set[str]:
        if self._admin is None:
            admin = AIOKafkaAdminClient(**aiokafka_options(self._kafka, "reply-topics"))
            await admin.start()
            self._admin = admin
        try:
            return set(await self._admin.list_topics())
        except Exception:
            await self.close()  # reconnect next time
            raise

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()


class ReplyProducer:
    """The producer of reply copies: kafka-python, never asking for auto-creation.

    Reply topics are created and deleted all the time (one per ``translate``
    call), and a caller may delete its topic between the worker's listing and
    the copy. aiokafka cannot be told not to auto-create in its metadata
    requests (on a broker that allows it the deleted topic comes back, empty,
    for good), and its sender re-requests metadata with no backoff while a batch
    waits for a vanished partition's leader (thousands of requests a second).
    kafka-python's producer asks for no auto-creation, backs off between
    metadata requests, and gives up within ``timeout_s``. It keeps asking for
    every topic it ever produced to, so :meth:`prune` (a worker timer) closes it
    once one of them is gone; the next send starts a new one. Sends run in a
    thread, one call at a time.
    """

    def __init__(
        self, kafka: KafkaSettings, lister: TopicLister, timeout_s: float, prefix: str
    ) -> None:
        self._kafka = kafka
        self._lister = lister
        self._timeout_s = timeout_s
        self._producer: KafkaProducer | None = None
        self._used: set[str] = set()
        self._lock = threading.Lock()  # a cancelled caller's thread may still be sending
        logging.getLogger("kafka.cluster").addFilter(_DeletedReplyTopics(prefix))

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        await asyncio.to_thread(self._send_all, records)

    async def prune(self) -> None:
        """Let go of the producer if a topic it produced to has been deleted."""
        if self._used and self._used - await self._lister():
            await asyncio.to_thread(self._let_go)

    def _send_all(self, records: Sequence[Outgoing]) -> None:
        with self._lock:
            if self._producer is None:
                timeout_ms = int(self._timeout_s * 1000)
                self._producer = KafkaProducer(
                    **{
                        **kafka_python_options(self._kafka, "replies"),
                        "request_timeout_ms": timeout_ms,
                    },
                    acks="all",
                    # best effort (the result is on the shared topic): a failed copy is
                    # given up, and with nothing retried no batch waits on a deleted topic
                    retries=0,
                    enable_idempotence=False,
                    allow_auto_create_topics=False,
                    max_block_ms=timeout_ms,
                    # must exceed linger + request timeout; the caller stops waiting sooner
                    delivery_timeout_ms=2 * timeout_ms,
                )
            self._used.update(r.topic for r in records)
            futures = [
                self._producer.send(r.topic, value=r.value, key=r.key, headers=r.headers)
                for r in records
            ]
            for future in futures:
                future.get(timeout=self._timeout_s)

    def _let_go(self) -> None:
        with self._lock:  # between sends
            producer, self._producer, self._used = self._producer, None, set()
        if producer is not None:
            # Its pending copies (to a deleted topic) expire within the delivery timeout;
            # kafka-python's close raises if they are still pending, so it waits them out,
            # on a thread of its own so that new copies need not wait.
            threading.Thread(
                target=producer.close,
                kwargs={"timeout": 3 * self._timeout_s},
                name="reply-producer-close",
                daemon=True,
            ).start()


class _DeletedReplyTopics(logging.Filter):
    """kafka-python's ERROR "Topic ... not found" for a reply topic, demoted to DEBUG:
    callers delete their topics when done, and :meth:`ReplyProducer.prune` lets go of
    them within a listing interval."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == "Topic %s not found in cluster metadata" and any(
            isinstance(a, str) and a.startswith(self._prefix) for a in args
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


@dataclass(frozen=True, slots=True)
class Held:
    """A fetched, admitted event waiting for its fair-share round."""

    event: EventT[Any]
    ticket: Ticket
    tenant: str
    chars: int
    # what an engine call pads to: source tokens when the agent counts them, else chars
    length: int


def held_of(
    event: EventT[Any], ticket: Ticket, count_tokens: Callable[[str, Pair], int] | None = None
) -> Held:
    """The event with its tenant, size and length (read from the request; anything
    unreadable counts for ``default`` and is dead-lettered by the decode step when its
    round comes). ``count_tokens`` (the model's tokenizer of the request's pair) gives
    the length in tokens."""
    try:
        document = json.loads(event.message.value or b"")
    except ValueError:
        document = None
    if not isinstance(document, dict):
        document = {}
    tenant, text = document.get("tenant"), document.get("text")
    chars = len(text) if isinstance(text, str) else 1
    length = chars
    if count_tokens is not None and isinstance(text, str):
        with contextlib.suppress(Exception):  # the engine step judges the text itself
            pair = Pair(str(document["source_lang"]), str(document["target_lang"]))
            length = count_tokens(text, pair)
    return Held(
        event, ticket, tenant_label(tenant if isinstance(tenant, str) else None), chars, length
    )


@dataclass
class Controls:
    """What the operator controls need in a worker, built from the settings."""

    cancels: CancelRegistry
    quarantine: QuarantineRegistry
    feed: ControlFeed
    quotas: QuotaLimiter
    reply_producer: ReplyProducer
    reply_copies: ReplyCopies
    listing_refresh_s: float
    sample_interval_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Controls:
        cancels = CancelRegistry(settings.limits.max_timeout_ms, settings.worker.cancel_max_entries)
        quarantine = QuarantineRegistry()
        replies = settings.replies
        lister = TopicLister(settings.kafka)
        producer = ReplyProducer(settings.kafka, lister, replies.copy_timeout_s, replies.prefix)
        return cls(
            cancels=cancels,
            quarantine=quarantine,
            feed=ControlFeed(settings.kafka, cancels, quarantine),
            quotas=QuotaLimiter(settings.tenants, settings.redis),
            reply_producer=producer,
            reply_copies=ReplyCopies(
                producer, ReplyTopicCheck(lister, replies.listing_refresh_s), replies.copy_timeout_s
            ),
            listing_refresh_s=replies.listing_refresh_s,
            sample_interval_s=settings.observability.sample_interval_s,
        )
