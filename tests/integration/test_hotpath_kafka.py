"""The hot path's batch-level cases against the real Kafka and Redis of the local stack.

The same cases as ``tests/unit/steps/test_hotpath.py``: what the unit suite proves
with fakes must hold with a real producer (acks=all, results and dead letters
read back from their topics) and a real Redis behind the L2 cache.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence

import pytest
import redis
from kafka.errors import KafkaError

from pipeline.client import reliable_producer
from pipeline.contract.messages import QuarantineRecord
from pipeline.contract.pairs import DLQ_TOPIC, QUARANTINE_TOPIC, RESULTS_TOPIC
from pipeline.control.quotas import QuotaLimiter
from pipeline.kafka.check import admin_client
from pipeline.kafka.records import Outgoing
from pipeline.kafka.reply_topics import ReplyTopic
from pipeline.kafka.topics import ensure_named
from pipeline.settings import Settings, TenantSettings, load_settings
from pipeline.steps.base import TransientError
from pipeline.storage.cache import RedisCache
from tests.hotpath_cases import CASES, Case, Harness
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration


class KafkaProducer:
    """A real producer behind the hot path's Producer protocol (kafka-python, acks=all)."""

    def __init__(self, settings: Settings) -> None:
        self._producer = reliable_producer(settings.kafka, "hotpath-test")
        self._timeout_s = settings.worker.produce_timeout_s
        # values in the order they were sent: records on different partitions
        # read back in no defined order, so the send order is kept here
        self.sent: list[bytes | None] = []

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        def send() -> None:
            futures = [
                self._producer.send(r.topic, key=r.key, value=r.value, headers=r.headers)
                for r in records
            ]
            self._producer.flush(self._timeout_s)
            for future in futures:
                future.get(timeout=self._timeout_s)
            self.sent.extend(r.value for r in records)

        try:
            await asyncio.to_thread(send)
        except KafkaError as exc:
            raise TransientError(f"producing failed: {exc}") from exc

    def close(self) -> None:
        self._producer.close(timeout=10)


def _quarantine_kind(value: bytes | None) -> str:
    """What a quarantine-topic record is: suspect, quarantined, or cleared (a tombstone)."""
    return "cleared" if value is None else str(QuarantineRecord.from_json(value).state)


class KafkaBackend:
    def __init__(self, settings: Settings) -> None:
        self.producer = KafkaProducer(settings)
        self.l2 = RedisCache(settings.redis)
        self._settings = settings
        self._redis = redis.Redis.from_url(settings.redis.url)
        self._reply = ReplyTopic.for_call(settings.kafka, settings.replies, label="hotpath")
        self.reply_topic = self._reply.create().name
        bootstrap = settings.kafka.bootstrap_servers
        ensure_named(settings, QUARANTINE_TOPIC)
        self._tails = [
            TopicTail(bootstrap, RESULTS_TOPIC),
            TopicTail(bootstrap, DLQ_TOPIC),
            TopicTail(bootstrap, self.reply_topic),
            TopicTail(bootstrap, QUARANTINE_TOPIC),
        ]

    def quotas(self, chars: dict[str, int]) -> QuotaLimiter:
        return QuotaLimiter(TenantSettings(quota_chars=chars), self._settings.redis)

    async def list_topics(self) -> set[str]:
        def names() -> set[str]:
            admin = admin_client(self._settings.kafka, "hotpath-test")
            try:
                return set(admin.list_topics())
            finally:
                admin.close()

        return await asyncio.to_thread(names)

    async def published(self, marker: str, expected: int) -> list[Outgoing]:
        def ours() -> list[Outgoing]:
            found = []
            kinds = ("result", "dead_letter", "result", None)
            for tail, kind in zip(self._tails, kinds, strict=True):
                for record in tail.drain(quiet_s=0.5):
                    if marker.encode() in (record.value or b"") + (record.key or b""):
                        found.append(
                            Outgoing(
                                tail.topic,
                                record.key,
                                record.value,
                                list(record.headers),
                                kind or _quarantine_kind(record.value),
                            )
                        )
            return found

        def send_order(record: Outgoing) -> int:
            sent = self.producer.sent
            return sent.index(record.value) if record.value in sent else len(sent)

        deadline = time.monotonic() + 30
        found = await asyncio.to_thread(ours)
        while len(found) < expected and time.monotonic() < deadline:
            found = await asyncio.to_thread(ours)
        return sorted(found, key=send_order)

    def write_raw(self, key: str, value: bytes) -> None:
        self._redis.set(key, value, ex=60)

    def close(self) -> None:
        self.producer.close()
        for tail in self._tails:
            tail.close()
        self._redis.close()
        self._reply.delete()


@pytest.fixture
def backend(stack: object) -> Iterator[KafkaBackend]:
    b = KafkaBackend(load_settings())
    yield b
    b.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_case(case: Case, backend: KafkaBackend) -> None:
    asyncio.run(case(Harness(backend)))
