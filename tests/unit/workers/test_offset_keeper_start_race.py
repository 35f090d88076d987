"""The offset book's lazy start: no rewinding a partition that took records meanwhile,
no crashing the worker when the broker is away (the stall check is skipped, not fatal).

Found by the chaos suite (``redis-down``, the first scenario after the workers
start, 7 duplicate results with no fault that could explain them): right
after an assignment, ``check_stalls`` (a timer, idle worker) and ``admit`` (an
agent's first batch) both find the partition unknown and both await the
group's committed offset. When ``admit`` gets it first and takes records,
``check_stalls`` then calls ``ledger.start`` again and puts the cursor back at
the committed offset: the next record looks like a skip, the partition is
sought back, and every record taken in between is processed a second time.
Nothing is lost (the seek refetches), but each becomes a duplicate result.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from pipeline.kafka.offsets import TopicPartition
from pipeline.settings import KafkaSettings
from workers.offset_keeper import OffsetKeeper

PART = TopicPartition("translate.requests", 5)
COMMITTED = 1


class FakeConsumer:
    def __init__(self) -> None:
        self.seeks: list[dict[TP, int]] = []

    async def highwaters(self, *tps: TP) -> dict[TP, int]:
        return {tp: 9 for tp in tps}

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return {tp: 0 for tp in tps}

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        self.seeks.append(offsets)


def event(offset: int) -> Any:
    return SimpleNamespace(
        message=SimpleNamespace(topic=PART.topic, partition=PART.partition, offset=offset)
    )


def test_a_late_lazy_start_does_not_rewind_a_partition_that_took_records() -> None:
    consumer = FakeConsumer()
    keeper = OffsetKeeper(SimpleNamespace(consumer=consumer), KafkaSettings(), "g", 0.5, 5.0)  # type: ignore[arg-type]
    keeper._probe = SimpleNamespace(first_offset=lambda tp, offset: offset)  # type: ignore[assignment]
    first_lookup_started, release_first = threading.Event(), threading.Event()
    lookups = 0

    def committed_offsets(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        nonlocal lookups
        lookups += 1
        if lookups == 1:  # the timer's lookup: slow (a loaded machine, a new admin client)
            first_lookup_started.set()
            release_first.wait(5)
        return {tp: COMMITTED for tp in tps}

    keeper.committed_offsets = committed_offsets  # type: ignore[method-assign]

    async def scenario() -> tuple[list[Any], int]:
        stalls = asyncio.create_task(keeper.check_stalls([PART], idle=True))
        await asyncio.to_thread(first_lookup_started.wait, 5)
        admitted, _ = await keeper.admit([event(o) for o in range(1, 9)])  # the first batch
        release_first.set()
        await stalls  # the timer's lookup returns after the batch was taken
        later, _ = await keeper.admit([event(9)])
        return admitted + later, keeper.ledger.owed(PART)

    admitted, owed = asyncio.run(scenario())
    assert [e.message.offset for e in admitted[:8]] == list(range(1, 9))
    assert consumer.seeks == [], f"sought back to {consumer.seeks}: offsets 1-8 come again"
    assert owed == 10
    assert [e.message.offset for e in admitted] == list(range(1, 10))


def test_a_stall_check_during_a_broker_restart_is_skipped_not_fatal() -> None:
    """Seen in CI: the stall timer's offset lookup raised NodeNotReadyError while the
    broker restarted, and the unhandled error in a Faust timer crashed the worker."""
    from kafka.errors import NodeNotReadyError

    consumer = FakeConsumer()
    keeper = OffsetKeeper(SimpleNamespace(consumer=consumer), KafkaSettings(), "g", 0.5, 5.0)  # type: ignore[arg-type]
    broker_up = False

    def committed_offsets(tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not broker_up:
            raise NodeNotReadyError(1)
        return {tp: COMMITTED for tp in tps}

    keeper.committed_offsets = committed_offsets  # type: ignore[method-assign]
    asyncio.run(keeper.check_stalls([PART], idle=True))
    assert not keeper.ledger.knows(PART), "nothing started from a failed lookup"
    broker_up = True
    asyncio.run(keeper.check_stalls([PART], idle=True))
    assert keeper.ledger.owed(PART) == COMMITTED, "the next check starts the partition"


def test_a_commit_while_the_broker_is_away_is_retried_not_raised() -> None:
    from kafka.errors import NodeNotReadyError

    attempts: list[dict[TP, int]] = []

    class Consumer(FakeConsumer):
        broker_up = False

        async def _commit(self, offsets: dict[TP, int]) -> bool:
            attempts.append(offsets)
            if not self.broker_up:
                raise NodeNotReadyError(1)
            return True

    consumer = Consumer()
    keeper = OffsetKeeper(SimpleNamespace(consumer=consumer), KafkaSettings(), "g", 0.5, 5.0)  # type: ignore[arg-type]
    keeper.committed_offsets = lambda tps: {tp: COMMITTED for tp in tps}  # type: ignore[method-assign]

    async def scenario() -> None:
        _, tickets = await keeper.admit([event(o) for o in range(1, 4)])
        keeper.done(tickets)
        assert not await keeper.commit(), "the broker is away: logged, not raised"
        assert keeper.ledger.to_commit() == {PART: 4}, "still owed a commit"
        consumer.broker_up = True
        assert await keeper.commit()
        assert keeper.ledger.to_commit() == {}

    asyncio.run(scenario())
    assert attempts == [{TP(PART.topic, PART.partition): 4}] * 2
