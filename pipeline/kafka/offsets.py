"""Which input offsets a worker may commit: contiguous processing, per partition.

At-least-once means an offset is committed only after every record before it
has produced its output and the producer has acknowledged that output. Faust
acknowledges events itself and has known paths, around rebalances, where a
live consumer skips a range of records or stalls its commits (faust-streaming
#216/#217, #315, #596). The worker therefore keeps its own book:

* a partition's records are *taken* strictly in offset order, starting at the
  group's committed offset; a record that arrives ahead of the next offset owed
  (a skip) is dropped and the partition is sought back, so nothing is skipped
  (unless a look at the log shows it has no records there); a record behind
  it (a replay of something already taken) is dropped;
* a taken offset is *done* once its outputs are acknowledged; the committable
  position is the lowest offset taken but not done (or the next offset owed).

This module is that book, as pure logic; ``workers/offset_keeper.py`` connects it to
the consumer (lazy start from the committed offset, seeks and commits).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class Verdict(enum.Enum):
    """What to do with one record offered to a partition's cursor."""

    TAKE = "take"  # the next offset owed: process it
    REPLAY = "replay"  # behind the next offset owed (already taken): drop it
    SEEK = "seek"  # ahead of the next offset owed: drop it, verify the gap, seek back
    STALE = "stale"  # fetched before the seek took effect: drop it, wait for the refetch


@dataclass
class PartitionCursor:
    """Where one partition stands: the next offset owed, what is in flight, what is committed.

    Offsets are never skipped on the cursor's own judgement: a record ahead of
    the owed offset means either the consumer skipped records (seek back and
    refetch) or the log has no records there (compaction, transaction markers,
    retention). Only a look at the log itself can tell which, so the caller
    verifies and calls :meth:`skip_to` for a real gap.
    """

    next_offset: int
    committed: int
    in_flight: set[int] = field(default_factory=set)
    # set once a skip was seen: records are dropped until the owed one arrives
    refetching: bool = False
    stale: int = 0
    skips: int = 0
    # offsets the log does not have, verified by the caller
    gaps_skipped: int = 0

    def offer(self, offset: int) -> Verdict:
        """Judge one record; TAKE moves the cursor past it and puts it in flight."""
        if offset == self.next_offset:
            self.refetching = False
            self.next_offset = offset + 1
            self.in_flight.add(offset)
            return Verdict.TAKE
        if offset < self.next_offset:
            return Verdict.REPLAY
        if not self.refetching:
            self.refetching = True
            self.skips += 1
            return Verdict.SEEK
        self.stale += 1
        return Verdict.STALE

    def skip_to(self, offset: int) -> None:
        """The log has no records before ``offset`` (verified): owe ``offset`` next."""
        if offset > self.next_offset:
            self.gaps_skipped += offset - self.next_offset
            self.next_offset = offset

    def done(self, offset: int) -> None:
        self.in_flight.discard(offset)

    @property
    def position(self) -> int:
        """The offset a commit may name now: everything before it is done."""
        return min(self.in_flight) if self.in_flight else self.next_offset


@dataclass(frozen=True, slots=True)
class Ticket:
    """A taken record: done() with it once its outputs are acknowledged."""

    tp: TopicPartition
    offset: int
    epoch: int


class OffsetLedger:
    """Cursors of the partitions a consumer owns in the current assignment (epoch).

    ``reset`` starts a new epoch on every rebalance: tickets from an earlier
    epoch are ignored, so a batch that finishes after its partition moved
    cannot advance the new owner's book.
    """

    def __init__(self) -> None:
        self._cursors: dict[TopicPartition, PartitionCursor] = {}
        self.epoch = 0

    def reset(self) -> None:
        self._cursors.clear()
        self.epoch += 1

    def knows(self, tp: TopicPartition) -> bool:
        return tp in self._cursors

    def start(self, tp: TopicPartition, committed: int) -> None:
        """Begin a partition at the group's committed offset (or the log start)."""
        self._cursors[tp] = PartitionCursor(next_offset=committed, committed=committed)

    def offer(self, tp: TopicPartition, offset: int) -> tuple[Verdict, Ticket | None]:
        verdict = self._cursors[tp].offer(offset)
        ticket = Ticket(tp, offset, self.epoch) if verdict is Verdict.TAKE else None
        return verdict, ticket

    def owed(self, tp: TopicPartition) -> int:
        """The next offset owed on ``tp`` (where a seek goes)."""
        return self._cursors[tp].next_offset

    def skip_to(self, tp: TopicPartition, offset: int) -> None:
        """A verified gap in the log: owe ``offset`` next on ``tp``."""
        self._cursors[tp].skip_to(offset)

    def done(self, tickets: list[Ticket]) -> None:
        for ticket in tickets:
            cursor = self._cursors.get(ticket.tp)
            if ticket.epoch == self.epoch and cursor is not None:
                cursor.done(ticket.offset)

    def to_commit(self) -> dict[TopicPartition, int]:
        """Positions that moved past the last commit."""
        return {
            tp: cursor.position
            for tp, cursor in self._cursors.items()
            if cursor.position > cursor.committed
        }

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            cursor = self._cursors.get(tp)
            if cursor is not None:
                cursor.committed = max(cursor.committed, offset)

    def owed_all(self) -> dict[TopicPartition, int]:
        """The next offset owed on every partition in the book."""
        return {tp: c.next_offset for tp, c in self._cursors.items()}

    def refetching(self) -> dict[TopicPartition, int]:
        """Partitions waiting for a refetch after a skip, with the offset owed."""
        return {tp: c.next_offset for tp, c in self._cursors.items() if c.refetching}

    def positions(self) -> dict[TopicPartition, tuple[int, int]]:
        """(committable position, committed) per partition, for lag metrics."""
        return {tp: (c.position, c.committed) for tp, c in self._cursors.items()}
