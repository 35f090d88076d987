"""The hot path's batch-level cases with in-memory fakes (no Kafka, no Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from pipeline.cache import RedisCache
from pipeline.settings import RedisSettings
from pipeline.steps.base import Outgoing, TransientError
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


class FakeBackend:
    def __init__(self) -> None:
        self.producer = MemoryProducer()
        self.redis = FakeRedis()
        self.l2 = RedisCache(RedisSettings(), client=self.redis)  # type: ignore[arg-type]

    async def published(self, marker: str, expected: int) -> list[Outgoing]:
        return [o for o in self.producer.sent if marker.encode() in o.value]

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
