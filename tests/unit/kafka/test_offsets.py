"""The offset book: contiguous processing per partition, commits only of what is done."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.kafka.offsets import OffsetLedger, TopicPartition, Verdict

TP = TopicPartition("translate.requests", 0)


def ledger_at(offset: int) -> OffsetLedger:
    ledger = OffsetLedger()
    ledger.start(TP, offset)
    return ledger


def test_takes_in_order_and_commits_only_what_is_done() -> None:
    ledger = ledger_at(10)
    tickets = [ledger.offer(TP, o)[1] for o in (10, 11, 12)]
    assert all(t is not None for t in tickets)
    assert ledger.to_commit() == {}  # taken, none done
    ledger.done([tickets[1]])  # 11 done, 10 still in flight
    assert ledger.to_commit() == {}
    ledger.done([tickets[0]])
    assert ledger.to_commit() == {TP: 12}  # 12 still in flight
    ledger.committed({TP: 12})
    ledger.done([tickets[2]])
    assert ledger.to_commit() == {TP: 13}


def test_a_skip_is_never_taken_and_asks_for_a_seek() -> None:
    ledger = ledger_at(10)
    assert ledger.offer(TP, 10)[0] is Verdict.TAKE
    assert ledger.offer(TP, 15) == (Verdict.SEEK, None)
    assert ledger.offer(TP, 16) == (Verdict.STALE, None)  # still the old fetch
    assert ledger.refetching() == {TP: 11}
    assert ledger.offer(TP, 11)[0] is Verdict.TAKE  # the refetch arrived
    assert ledger.refetching() == {}
    assert ledger.offer(TP, 12)[0] is Verdict.TAKE


def test_replays_are_dropped() -> None:
    ledger = ledger_at(10)
    ledger.offer(TP, 10)
    assert ledger.offer(TP, 10) == (Verdict.REPLAY, None)
    assert ledger.offer(TP, 3) == (Verdict.REPLAY, None)


def test_a_verified_gap_moves_the_cursor_on() -> None:
    ledger = ledger_at(10)
    assert ledger.offer(TP, 14)[0] is Verdict.SEEK
    ledger.skip_to(TP, 14)  # the log has nothing in [10, 14)
    verdict, ticket = ledger.offer(TP, 14)
    assert verdict is Verdict.TAKE and ticket is not None
    ledger.done([ticket])
    assert ledger.to_commit() == {TP: 15}


def test_tickets_of_an_earlier_assignment_are_ignored() -> None:
    ledger = ledger_at(10)
    _, old = ledger.offer(TP, 10)
    ledger.reset()  # rebalance
    ledger.start(TP, 10)
    assert old is not None
    ledger.done([old])
    assert ledger.to_commit() == {}, "a batch of the old epoch must not commit for the new one"


@dataclass
class SkippingConsumer:
    """A consumer that skips ranges of records, and whose seeks take effect late.

    ``skips[k]`` skips that many records after the k-th delivery; after a seek
    it first delivers ``stale[i]`` more records of its old run (already
    fetched), then restarts at the sought offset.
    """

    log: list[int]
    skips: dict[int, int]
    stale: list[int]
    pos: int = 0
    delivered: int = 0
    seek_to: int | None = None
    stale_left: int = 0
    seeks: int = field(default=0)

    def deliver(self) -> int | None:
        if self.seek_to is not None and self.stale_left <= 0:
            self.pos = next((i for i, o in enumerate(self.log) if o >= self.seek_to), len(self.log))
            self.seek_to = None
        if self.pos >= len(self.log):
            if self.seek_to is None:
                return None
            self.stale_left = 0  # nothing more of the old run: the seek takes effect
            return self.deliver()
        offset = self.log[self.pos]
        self.pos += 1 + self.skips.get(self.delivered, 0)
        self.delivered += 1
        self.stale_left -= 1
        return offset

    def seek(self, offset: int) -> None:
        self.seek_to = offset
        self.stale_left = self.stale[self.seeks % len(self.stale)] if self.stale else 0
        self.seeks += 1


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    skips=st.dictionaries(st.integers(0, 80), st.integers(1, 10), max_size=6),
    stale=st.lists(st.integers(0, 15), max_size=4),
)
def test_every_record_of_the_log_is_taken_once_in_order(
    gaps: list[int], skips: dict[int, int], stale: list[int]
) -> None:
    """Whatever the consumer skips, and however late its seeks act, nothing is lost."""
    log, offset = [], 100
    for gap in gaps:  # a gap: offsets the log does not have (markers, compaction)
        offset += gap
        log.append(offset)
        offset += 1
    consumer = SkippingConsumer(log, skips, stale)
    ledger = ledger_at(100)
    taken: list[int] = []
    for _ in range(10_000):
        seen = consumer.deliver()
        if seen is None:
            if ledger.owed(TP) > log[-1]:
                break
            # Idle with records left behind the owed offset (a skip at the tail that no
            # later record reveals): the stall check seeks back.
            consumer.seek(ledger.owed(TP))
            continue
        verdict, ticket = ledger.offer(TP, seen)
        if verdict is Verdict.SEEK:  # what workers/offset_keeper.py does: look at the log
            owed = ledger.owed(TP)
            first = next((o for o in log if o >= owed), None)
            if first is not None and first > owed:
                ledger.skip_to(TP, first)
                verdict, ticket = ledger.offer(TP, seen)
            if ticket is None:
                consumer.seek(ledger.owed(TP))
        if ticket is not None:
            taken.append(seen)
            ledger.done([ticket])
    assert taken == log
    assert ledger.to_commit() == {TP: log[-1] + 1}
