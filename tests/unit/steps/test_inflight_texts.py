"""InFlightTexts: a text two batches in flight both need is translated once."""

from __future__ import annotations

import asyncio

import pytest

from pipeline.kafka.records import Record
from pipeline.settings import WorkerSettings
from pipeline.steps.base import Item, TransientError
from pipeline.steps.in_flight import InFlightTexts
from pipeline.storage.cache import CachedTranslation

RECENT = WorkerSettings().recent_translations


def _items(*digests: str) -> list[Item]:
    return [Item(Record("t", 0, i, b"k", b"{}"), digest=d) for i, d in enumerate(digests)]


class SlowEngine:
    """Translates items after ``release`` is set; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = False

    async def __call__(self, items: list[Item]) -> None:
        self.asked.append([i.digest or "" for i in items])
        await self.release.wait()
        if self.fail:
            raise TransientError("engine away")
        for item in items:
            item.translation = CachedTranslation(f"T({item.digest})", "m", 1, 1)
            item.cache = "miss"


def test_a_text_an_earlier_batch_is_translating_waits_for_it() -> None:
    async def scenario() -> tuple[list[Item], list[Item], SlowEngine]:
        texts, engine = InFlightTexts(RECENT), SlowEngine()
        first, second = _items("a", "b"), _items("b", "c")
        one = asyncio.create_task(texts.translate(first, engine))
        await asyncio.sleep(0)  # the first batch has claimed its texts
        two = asyncio.create_task(texts.translate(second, engine))
        await asyncio.sleep(0)
        engine.release.set()
        await asyncio.gather(one, two)
        return first, second, engine

    first, second, engine = asyncio.run(scenario())
    assert engine.asked == [["a", "b"], ["c"]]  # "b" once
    assert [(i.translation.text, i.cache) for i in second if i.translation] == [
        ("T(b)", "window"),
        ("T(c)", "miss"),
    ]
    assert first[1].cache == "miss"


async def _second_batch_waiting_on(
    first: SlowEngine,
) -> tuple[asyncio.Task[None], asyncio.Task[None], list[Item], SlowEngine]:
    """A first batch translating "a" on ``first``, and a second batch that needs "a" too."""
    texts, working = InFlightTexts(RECENT), SlowEngine()
    working.release.set()
    one = asyncio.create_task(texts.translate(_items("a"), first))
    await asyncio.sleep(0)
    second = _items("a")
    two = asyncio.create_task(texts.translate(second, working))
    await asyncio.sleep(0)
    return one, two, second, working


def test_a_text_whose_earlier_batch_failed_is_translated_after_all() -> None:
    async def scenario() -> tuple[list[Item], SlowEngine]:
        failing = SlowEngine()
        failing.fail = True
        one, two, second, working = await _second_batch_waiting_on(failing)
        failing.release.set()
        with pytest.raises(TransientError):
            await one
        await two
        return second, working

    second, working = asyncio.run(scenario())
    assert working.asked == [[], ["a"]]  # waited first, then translated it itself
    assert second[0].translation is not None and second[0].cache == "miss"


def test_a_cancelled_batch_releases_its_waiters() -> None:
    async def scenario() -> list[Item]:
        one, two, second, _ = await _second_batch_waiting_on(SlowEngine())
        one.cancel()  # a rebalance: the first batch is abandoned
        await asyncio.wait_for(two, 5)
        return second

    second = asyncio.run(scenario())
    assert second[0].cache == "miss"


def test_a_batch_after_the_translation_is_answered_by_it_until_it_is_old() -> None:
    # the later batch looked the window up before the first one stored "a" there
    # (a slow cache lookup in between): the engine must not translate "a" again
    async def scenario() -> tuple[list[Item], SlowEngine, list[Item], SlowEngine]:
        texts, engine = InFlightTexts(recent=2), SlowEngine()
        engine.release.set()
        await texts.translate(_items("a", "b"), engine)
        later, again = _items("a"), SlowEngine()
        again.release.set()
        await texts.translate(later, again)
        await texts.translate(_items("c", "d"), engine)  # "a" and "b" age out
        oldest, once_more = _items("a"), SlowEngine()
        once_more.release.set()
        await texts.translate(oldest, once_more)
        return later, again, oldest, once_more

    later, again, oldest, once_more = asyncio.run(scenario())
    assert again.asked == [[]]
    assert (later[0].translation.text, later[0].cache) == ("T(a)", "window")
    assert once_more.asked == [["a"]], "only the last `recent` translations are kept"
    assert oldest[0].cache == "miss"


def test_a_failed_translation_is_not_kept() -> None:
    async def scenario() -> SlowEngine:
        texts, failing = InFlightTexts(RECENT), SlowEngine()
        failing.fail = True
        failing.release.set()
        with pytest.raises(TransientError):
            await texts.translate(_items("a"), failing)
        again = SlowEngine()
        again.release.set()
        await texts.translate(_items("a"), again)
        return again

    assert asyncio.run(scenario()).asked == [["a"]]  # no stale claim, nothing to reuse
