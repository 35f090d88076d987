"""The translation chain without Kafka: deadlines, dedup, cache levels, failure narrowing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
import redis

from pipeline.cache import CachedTranslation, LruCache, RedisCache, TwoLevelCache
from pipeline.chain import EngineRunner, TranslationChain, WorkItem
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import Translation, Translator
from pipeline.messages import TranslationRequest
from pipeline.pairs import Pair
from pipeline.routing import request_digest
from pipeline.settings import RedisSettings

PAIR = Pair("en", "en-XA")
NOW = 1_000_000


class RecordingTranslator(Translator):
    """Upper-cases text; fails whole batches that contain 'POISON'."""

    model_id = "fake-v1"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        self.calls.append(list(texts))
        if any("POISON" in t for t in texts):
            raise RuntimeError("engine exploded")
        return [Translation(t.upper(), len(t), len(t)) for t in texts]

    def count_tokens(self, text: str, pair: Pair) -> int:
        return len(text)

    @property
    def translated(self) -> list[str]:
        return [t for call in self.calls for t in call]


class DictWindow:
    def __init__(self) -> None:
        self.entries: dict[str, CachedTranslation] = {}

    def get(self, item: WorkItem) -> CachedTranslation | None:
        return self.entries.get(item.digest)

    def put(self, item: WorkItem, value: CachedTranslation) -> None:
        self.entries[item.digest] = value


class DownRedis:
    """A redis client whose every call fails like a dead server."""

    def mget(self, keys: list[str]) -> list[bytes | None]:
        raise redis.ConnectionError("connection refused")

    def pipeline(self, transaction: bool = False) -> DownRedis:
        raise redis.ConnectionError("connection refused")

    def close(self) -> None:
        pass


def item(text: str, request_id: str, *, submitted_at: int = NOW, timeout_ms: int = 10_000,
         tenant: str | None = None) -> WorkItem:
    request = TranslationRequest(
        request_id=request_id, source_lang="en", target_lang="en-XA", text=text,
        submitted_at=submitted_at, timeout_ms=timeout_ms, tenant=tenant,
    )
    return WorkItem(request, request_digest(request, "fake-v1"))


def make_chain(
    translator: RecordingTranslator, *, window: DictWindow | None = None,
    cache: TwoLevelCache | None = None, budget: int = 1000,
) -> TranslationChain:
    return TranslationChain(
        pair=PAIR,
        engine=EngineRunner(translator, TokenBudgetBatcher(token_budget=budget)),
        model_id="fake-v1",
        cache=cache or TwoLevelCache(LruCache(100), None),
        window=window or DictWindow(),
        default_timeout_ms=30_000,
        worker="test",
        clock=lambda: NOW + 5,
    )


def run(chain: TranslationChain, items: list[WorkItem]):  # type: ignore[no-untyped-def]
    return asyncio.run(chain.process(items))


def test_one_result_per_request_in_order() -> None:
    translator = RecordingTranslator()
    items = [item(f"text {i}", f"r{i}") for i in range(10)]
    results, stats = run(make_chain(translator), items)
    assert [r.request_id for r in results] == [f"r{i}" for i in range(10)]
    assert [r.translation for r in results] == [f"TEXT {i}" for i in range(10)]
    assert all(r.status == "ok" and r.cache == "miss" for r in results)
    assert results[0].latency_ms == 5
    assert stats.engine_texts == 10


def test_expired_requests_time_out_without_the_engine() -> None:
    translator = RecordingTranslator()
    items = [item("late", "late", submitted_at=NOW - 200, timeout_ms=100), item("ok", "ok")]
    results, stats = run(make_chain(translator), items)
    assert [r.status for r in results] == ["timeout", "ok"]
    assert translator.translated == ["ok"]
    assert stats.timeouts == 1


def test_in_batch_duplicates_are_translated_once() -> None:
    translator = RecordingTranslator()
    items = [item("same", "a"), item("other", "b"), item("same", "c")]
    results, _ = run(make_chain(translator), items)
    assert sorted(translator.translated) == ["other", "same"]
    assert [r.cache for r in results] == ["miss", "miss", "window"]
    assert results[2].translation == "SAME"


def test_other_tenant_is_not_deduplicated() -> None:
    translator = RecordingTranslator()
    run(make_chain(translator), [item("same", "a"), item("same", "b", tenant="acme")])
    assert translator.translated == ["same", "same"]


def test_window_then_l1_then_l2() -> None:
    translator = RecordingTranslator()
    window = DictWindow()
    chain = make_chain(translator, window=window)
    run(chain, [item("hello", "a")])
    results, _ = run(chain, [item("hello", "b")])
    assert results[0].cache == "window"
    window.entries.clear()
    results, _ = run(chain, [item("hello", "c")])
    assert results[0].cache == "l1"
    assert translator.translated == ["hello"]


def test_poison_text_fails_alone() -> None:
    translator = RecordingTranslator()
    items = [item(f"good {i}", f"g{i}") for i in range(7)] + [item("POISON", "bad")]
    results, stats = run(make_chain(translator), items)
    by_id = {r.request_id: r for r in results}
    assert by_id["bad"].status == "error"
    assert "engine exploded" in (by_id["bad"].error or "")
    assert all(by_id[f"g{i}"].status == "ok" for i in range(7))
    assert stats.errors == 1


def test_token_budget_splits_engine_batches() -> None:
    translator = RecordingTranslator()
    items = [item("x" * 10 + str(i), f"r{i}") for i in range(10)]
    _, stats = run(make_chain(translator, budget=30), items)
    assert all(sum(len(t) for t in call) <= 33 for call in translator.calls)
    assert len(translator.calls) > 1
    assert sum(stats.engine_batches) == 10


def test_redis_down_degrades_to_l1() -> None:
    translator = RecordingTranslator()
    l2 = RedisCache(RedisSettings(), client=DownRedis())  # type: ignore[arg-type]
    chain = make_chain(translator, cache=TwoLevelCache(LruCache(100), l2), window=DictWindow())
    results, _ = run(chain, [item("a", "1"), item("b", "2")])
    assert [r.status for r in results] == ["ok", "ok"]
    assert l2.errors == 1  # put failed once; then backed off without more calls
    results, _ = run(chain, [item("c", "3")])
    assert results[0].status == "ok"
    assert l2.errors == 1


@pytest.mark.parametrize("size", [0, 1])
def test_l1_can_be_disabled_or_tiny(size: int) -> None:
    l1 = LruCache(size)
    l1.put_many({"a": CachedTranslation("A", "m", 1, 1), "b": CachedTranslation("B", "m", 1, 1)})
    assert len(l1) == size


class BrokenWindow(DictWindow):
    def get(self, item: WorkItem) -> CachedTranslation | None:
        raise RuntimeError("table unavailable")


def test_failure_outside_the_engine_still_answers_every_request() -> None:
    translator = RecordingTranslator()
    items = [item("a", "1"), item("b", "2")]
    results, stats = run(make_chain(translator, window=BrokenWindow()), items)
    assert [r.request_id for r in results] == ["1", "2"]
    assert {r.status for r in results} == {"error"}
    assert "table unavailable" in (results[0].error or "")
    assert stats.failure and stats.errors == 2
