"""A group coordinator that moves does not stall the offset book.

Found by the chaos suite: a few minutes after ``kill-broker`` healed, the
group's coordinator moved back to the restarted broker (the brokers'
preferred-leader rebalance). kafka-python's admin client keeps the coordinator
it found first, so every committed-offset lookup failed with
NotCoordinatorError from then on: the worker could not start a partition
again, the next restarted worker never answered its probe, and 1,325
acknowledged requests waited unanswered until the run ended.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kafka import TopicPartition as KafkaTP
from kafka.errors import NotCoordinatorError
from kafka.structs import OffsetAndMetadata

from pipeline.kafka.offsets import TopicPartition
from pipeline.settings import KafkaSettings
from workers.offset_keeper import OffsetKeeper

PART = TopicPartition("translate.requests", 3)


class FakeAdmin:
    """An admin client that either knows the coordinator (offsets) or does not (an error)."""

    def __init__(self, answer: dict[KafkaTP, OffsetAndMetadata] | Exception) -> None:
        self.answer = answer
        self.closed = False

    def list_group_offsets(
        self, specs: dict[str, list[KafkaTP]]
    ) -> dict[str, dict[KafkaTP, OffsetAndMetadata]]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return {group: self.answer for group in specs}

    def close(self) -> None:
        self.closed = True


def test_a_failed_lookup_drops_the_client_and_the_next_one_finds_the_coordinator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale = FakeAdmin(NotCoordinatorError("OffsetFetchResponse failed for group 'g'."))
    fresh = FakeAdmin({KafkaTP(PART.topic, PART.partition): OffsetAndMetadata(7, "", -1)})
    clients = iter([stale, fresh])  # a third client would raise StopIteration
    monkeypatch.setattr("workers.offset_keeper.admin_client", lambda _kafka, _role: next(clients))
    keeper = OffsetKeeper(SimpleNamespace(consumer=None), KafkaSettings(), "g", 0.5, 5.0)  # type: ignore[arg-type]

    with pytest.raises(NotCoordinatorError):
        keeper.committed_offsets([PART])
    assert stale.closed

    assert keeper.committed_offsets([PART]) == {PART: 7}
    assert keeper.committed_offsets([PART]) == {PART: 7}, "a working client is kept"


class FakeConsumer:
    """The log probe's consumer: a partition whose first record is at offset 4."""

    def __init__(self, **_options: object) -> None:
        self.closed = False

    def assign(self, _tps: list[KafkaTP]) -> None: ...

    def beginning_offsets(self, tps: list[KafkaTP]) -> dict[KafkaTP, int]:
        return dict.fromkeys(tps, 4)

    def close(self) -> None:
        self.closed = True


def test_close_releases_the_admin_client_and_the_probe_and_they_reopen_when_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admins = [FakeAdmin({}), FakeAdmin({})]
    consumers: list[FakeConsumer] = []
    opened = iter(admins)
    monkeypatch.setattr("workers.offset_keeper.admin_client", lambda _kafka, _role: next(opened))

    def new_consumer(**options: object) -> FakeConsumer:
        consumers.append(FakeConsumer(**options))
        return consumers[-1]

    monkeypatch.setattr("workers.offset_keeper.KafkaConsumer", new_consumer)
    keeper = OffsetKeeper(SimpleNamespace(consumer=None), KafkaSettings(), "g", 0.5, 5.0)  # type: ignore[arg-type]
    keeper.committed_offsets([PART])
    assert keeper._probe.first_offset(PART, 0) == 4  # before the log start: deleted by retention

    keeper.close()
    assert admins[0].closed and consumers[0].closed
    keeper.close()  # a second close has nothing left to close

    keeper.committed_offsets([PART])
    assert keeper._probe.first_offset(PART, 0) == 4
    assert not admins[1].closed and len(consumers) == 2 and not consumers[1].closed
