"""Edge cases of the control steps (the batch-level cases are in tests/hotpath_cases.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from pipeline.contract.messages import TranslationRequest, now_ms
from pipeline.contract.pairs import Pair
from pipeline.control.cancels import CancelRegistry
from pipeline.kafka.records import Outgoing, Record
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.steps.base import Batch, TransientError
from pipeline.steps.cancel import Cancel
from pipeline.steps.replies import ReplyCopies

PAIR = Pair("en", "en-XA")


def batch_of(n: int) -> Batch:
    batch = Batch.of([Record("t", 0, i, None, b"") for i in range(n)], model_id="m", worker="w")
    for i, item in enumerate(batch.items):
        item.request = TranslationRequest(
            request_id=f"r-{i}",
            source_lang="en",
            target_lang="en-XA",
            text="x",
            submitted_at=now_ms(),
        )
    return batch


def test_cancel_waits_for_the_feed_then_gives_up_transiently() -> None:
    registry = CancelRegistry(60_000, 10)

    async def scenario() -> None:
        step = Cancel(registry, ready_wait_s=0.2)
        with pytest.raises(TransientError, match=r"translate\.cancel has not been read"):
            await step(batch_of(1))
        waiting = asyncio.create_task(Cancel(registry, ready_wait_s=5)(batch_of(1)))
        await asyncio.sleep(0.1)
        registry.ready = True  # the feed caught up meanwhile: the batch goes on
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


class FailingProducer:
    def __init__(self, slow: bool = False) -> None:
        self.slow = slow
        self.calls = 0

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        self.calls += 1
        if self.slow:
            await asyncio.sleep(10)
        raise TransientError("broker unreachable")


def with_results(reply_to: str) -> Batch:
    batch = batch_of(2)
    for item in batch.items:
        assert item.request is not None
        batch.resolve(item, "ok", translation="y")
        assert item.result is not None
        batch.outgoing.append(Outgoing.for_result(item.result, [], reply_to=reply_to))
    return batch


def test_reply_copies_never_fail_the_batch() -> None:
    async def listing() -> set[str]:
        return {"translate.replies.a"}

    async def broken_listing() -> set[str]:
        raise OSError("no broker")

    async def scenario() -> None:
        slow = FailingProducer(slow=True)
        await ReplyCopies(slow, ReplyTopicCheck(listing), timeout_s=0.1)(
            with_results("translate.replies.a")
        )
        assert slow.calls == 1, "a copy that takes too long is given up, not retried"
        failing = FailingProducer()
        await ReplyCopies(failing, ReplyTopicCheck(listing), 1.0)(
            with_results("translate.replies.a")
        )
        unused = FailingProducer()
        await ReplyCopies(unused, ReplyTopicCheck(broken_listing), 1.0)(
            with_results("translate.replies.a")
        )
        await ReplyCopies(unused, ReplyTopicCheck(listing), 1.0)(
            with_results("translate.replies.gone")
        )
        assert unused.calls == 0, "no listing, or the topic is gone: no copy"

    asyncio.run(scenario())
