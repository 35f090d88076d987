"""The hot path's batch-level cases with in-memory fakes (no Kafka, no Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from pipeline.control.quotas import QuotaDecision
from pipeline.kafka.records import Outgoing
from pipeline.settings import RedisSettings
from pipeline.steps.base import AgentCues, TransientError
from pipeline.storage.cache import RedisCache
from tests.hotpath_cases import CASES, Case, Harness


class FakeRedis:
    """The few Redis calls RedisCache makes, over a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def mget(self, keys: list[str]) -> list[bytes | None]:
        return [self.data.get(k) for k in keys]

    def set(self, key: str, value: str | bytes, ex: int | None = None) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def pipeline(self, transaction: bool = False) -> FakeRedis:
        return self

    def execute(self) -> None:
        pass

    def __enter__(self) -> FakeRedis:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryProducer:
    """Records what it is asked to publish; ``fail`` makes the broker unreachable."""

    def __init__(self) -> None:
        self.sent: list[Outgoing] = []
        self.fail = False

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        if self.fail:
            raise TransientError("broker unreachable")
        self.sent.extend(records)


class FakeQuotas:
    """Characters per tenant, never forgotten; a request id is charged once."""

    def __init__(self, chars: dict[str, int]) -> None:
        self._chars = chars
        self._used: dict[str, int] = {}
        self._charged: set[str] = set()

    @property
    def enabled(self) -> bool:
        return bool(self._chars)

    async def charge_async(
        self, costs: Mapping[str, Sequence[tuple[str, int]]]
    ) -> dict[str, list[QuotaDecision]]:
        out: dict[str, list[QuotaDecision]] = {}
        for tenant, requests in costs.items():
            quota = self._chars.get(tenant)
            decisions = []
            for request_id, cost in requests:
                used = self._used.get(tenant, 0)
                if quota is None or request_id in self._charged or used + cost <= quota:
                    if quota is not None and request_id not in self._charged:
                        self._used[tenant] = used + cost
                        self._charged.add(request_id)
                    decisions.append(QuotaDecision(True))
                else:
                    decisions.append(QuotaDecision(False, 1000, quota))
            out[tenant] = decisions
        return out


class FakeBackend:
    reply_topic = "translate.replies.test"

    def __init__(self) -> None:
        self.producer = MemoryProducer()
        self.redis = FakeRedis()
        self.l2 = RedisCache(RedisSettings(), client=self.redis)  # type: ignore[arg-type]

    def quotas(self, chars: dict[str, int]) -> FakeQuotas:
        return FakeQuotas(chars)

    async def list_topics(self) -> set[str]:
        return {self.reply_topic, "translate.results"}

    async def published(self, marker: str, expected: int) -> list[Outgoing]:
        return [
            o for o in self.producer.sent if marker.encode() in (o.value or b"") + (o.key or b"")
        ]

    def write_raw(self, key: str, value: bytes) -> None:
        self.redis.data[key] = value


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_case(case: Case) -> None:
    asyncio.run(case(Harness(FakeBackend())))


def test_a_failed_publish_is_retried_and_published_once_it_works() -> None:
    backend = FakeBackend()
    harness = Harness(backend)
    backend.producer.fail = True

    async def heal(_exc: BaseException, _sleep: float) -> None:
        backend.producer.fail = False

    async def scenario() -> None:
        batch = await harness.runner.run(
            harness.records([harness.request(0, "hello")]), on_retry=heal
        )
        assert batch.stats.attempts == 2
        (result,) = (await harness.results(1)).values()
        assert result.status == "ok"

    asyncio.run(scenario())


def test_a_batch_announces_its_last_engine_call_before_computing_it() -> None:
    harness = Harness(FakeBackend())
    seen: list[tuple[str, int]] = []  # (hook, engine calls made) at each hook

    def hook(name: str) -> Callable[[], None]:
        return lambda: seen.append((name, len(harness.translator.calls)))

    async def scenario() -> None:
        records = harness.records([harness.request(0, "hello"), harness.request(1, "bye")])
        await harness.runner.run(records, cues=AgentCues(hook("hand off"), hook("last call")))

    asyncio.run(scenario())
    assert seen == [("last call", 0), ("hand off", 1)]


def test_a_batch_hands_off_once_translated_before_anything_is_published() -> None:
    backend = FakeBackend()
    harness = Harness(backend)
    seen: list[tuple[int, int]] = []  # (engine calls, records published) at each hand-off
    backend.producer.fail = True  # the first attempt fails to publish, after its hand-off

    def hand_off() -> None:
        seen.append((len(harness.translator.calls), len(backend.producer.sent)))

    async def heal(_exc: BaseException, _sleep: float) -> None:
        backend.producer.fail = False

    async def scenario() -> None:
        records = harness.records([harness.request(0, "hello"), harness.request(1, "bye")])
        await harness.runner.run(records, on_retry=heal, cues=AgentCues(hand_off))

    asyncio.run(scenario())
    # each attempt hands off after the engine step and before its publish; the retry's
    # engine step found both translations stored by the first attempt (one call in all)
    assert seen == [(1, 0), (1, 0)]
    assert len(backend.producer.sent) == 2
