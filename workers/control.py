"""The operator controls in a worker: the cancel feed, the reply-topic listing, held events.

Every worker needs every cancel (a request's partition in the work topics
has nothing to do with its cancel's partition), so the feed is a plain
aiokafka consumer with no group, assigned all of ``translate.cancel`` from
its start, feeding the pure :class:`~pipeline.cancel.CancelRegistry`. The
reply-topic listing backs :class:`~pipeline.replies.ReplyTopicCheck`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from faust.types import EventT

from pipeline import metrics
from pipeline.cancel import CancelRegistry, apply_record
from pipeline.fairness import tenant_label
from pipeline.kafka_clients import aiokafka_options
from pipeline.offsets import Ticket
from pipeline.pairs import CANCEL_TOPIC, RESULTS_TOPIC
from pipeline.quota import QuotaLimiter
from pipeline.replies import ReplyTopicCheck
from pipeline.settings import KafkaSettings, Settings
from pipeline.steps.base import Outgoing
from pipeline.steps.replies import ReplyCopies

log = logging.getLogger(__name__)

RETRY_S = 2.0


class CancelFeed:
    """Reads ``translate.cancel`` into ``registry`` for as long as the worker runs.

    ``registry.ready`` turns true once the feed has read every partition up to
    the end offsets it found when it started; until then the cancel step holds
    batches back (a cancel published before a restart is not missed). A lost
    connection is retried; the registry keeps what it has.
    """

    def __init__(self, kafka: KafkaSettings, registry: CancelRegistry) -> None:
        self._kafka = kafka
        self._registry = registry
        self.unreadable = 0

    async def run(self) -> None:
        while True:
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the broker went away: read again from the start
                log.warning("cancel feed interrupted (%s); reconnecting in %.0fs", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)

    async def _follow(self) -> None:
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self._kafka, "cancels"),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        partitions = await self._partitions()
        await consumer.start()
        try:
            tps = [TopicPartition(CANCEL_TOPIC, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            while True:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        if not apply_record(self._registry, record.key, record.value):
                            self.unreadable += 1
                if not self._registry.ready and await _caught_up(consumer, ends):
                    self._registry.ready = True
                    log.info("cancel feed caught up: %d live cancels", len(self._registry))
                metrics.CANCELS_KNOWN.set(len(self._registry))
        finally:
            await consumer.stop()

    async def _partitions(self) -> list[int]:
        admin = AIOKafkaAdminClient(**aiokafka_options(self._kafka, "cancels-admin"))
        await admin.start()
        try:
            (topic,) = await admin.describe_topics([CANCEL_TOPIC])
        finally:
            await admin.close()
        if topic.get("error_code") or not topic.get("partitions"):
            raise RuntimeError(f"topic {CANCEL_TOPIC} is not available")
        return sorted(p["partition"] for p in topic["partitions"])


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
    """The producer of reply copies: its own, so its metadata can forget deleted topics.

    aiokafka's client refreshes metadata for every topic it ever produced to,
    and logs an ERROR for each one that no longer exists. Reply topics are
    created and deleted all the time (one per ``translate`` call), so this
    producer prunes its topic set to the reply topics that still exist, at
    most every ``prune_s``.
    """

    def __init__(self, kafka: KafkaSettings, lister: TopicLister, prune_s: float) -> None:
        self._kafka = kafka
        self._lister = lister
        self._prune_s = prune_s
        self._producer: AIOKafkaProducer | None = None
        self._used: set[str] = set()
        self._pruned_at = 0.0

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        if self._producer is None:
            producer = AIOKafkaProducer(**aiokafka_options(self._kafka, "replies"), acks="all")
            await producer.start()
            self._producer = producer
        futures = [
            await self._producer.send(r.topic, r.value, key=r.key, headers=r.headers)
            for r in records
        ]
        await asyncio.gather(*futures)
        self._used.update(r.topic for r in records)
        await self._prune()

    async def _prune(self) -> None:
        now = time.monotonic()
        if self._producer is None or now - self._pruned_at < self._prune_s:
            return
        self._pruned_at = now
        live = self._used & await self._lister()
        if live != self._used:
            self._used = live
            # an empty set would mean "every topic" to the client: keep one that exists
            self._producer.client.set_topics(live or {RESULTS_TOPIC})


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
    event: EventT[Any], ticket: Ticket, count_tokens: Callable[[str], int] | None = None
) -> Held:
    """The event with its tenant, size and length (read from the request; anything
    unreadable counts for ``default`` and is dead-lettered by the decode step when its
    round comes). ``count_tokens`` (the pair's tokenizer) gives the length in tokens."""
    try:
        document = json.loads(event.message.value or b"")
        tenant = document.get("tenant") if isinstance(document, dict) else None
        text = document.get("text") if isinstance(document, dict) else None
    except ValueError:
        tenant = text = None
    chars = len(text) if isinstance(text, str) else 1
    length = chars
    if count_tokens is not None and isinstance(text, str):
        with contextlib.suppress(Exception):  # the engine step judges the text itself
            length = count_tokens(text)
    return Held(
        event, ticket, tenant_label(tenant if isinstance(tenant, str) else None), chars, length
    )


@dataclass
class Controls:
    """What the operator controls need in a worker, built from the settings."""

    cancels: CancelRegistry
    feed: CancelFeed
    quotas: QuotaLimiter
    reply_copies: ReplyCopies
    sample_interval_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Controls:
        cancels = CancelRegistry(settings.limits.max_timeout_ms, settings.worker.cancel_max_entries)
        replies = settings.replies
        lister = TopicLister(settings.kafka)
        return cls(
            cancels=cancels,
            feed=CancelFeed(settings.kafka, cancels),
            quotas=QuotaLimiter(settings.tenants, settings.redis),
            reply_copies=ReplyCopies(
                ReplyProducer(settings.kafka, lister, replies.listing_refresh_s),
                ReplyTopicCheck(lister, replies.listing_refresh_s),
                replies.copy_timeout_s,
            ),
            sample_interval_s=settings.observability.sample_interval_s,
        )
