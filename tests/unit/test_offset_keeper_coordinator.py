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

from pipeline.offsets import TopicPartition
from pipeline.settings import KafkaSettings
from workers.offsets import OffsetKeeper

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
    monkeypatch.setattr("workers.offsets.admin_client", lambda _kafka, _role: next(clients))
    keeper = OffsetKeeper(SimpleNamespace(consumer=None), KafkaSettings(), "g", 0.5)  # type: ignore[arg-type]

    with pytest.raises(NotCoordinatorError):
        keeper.committed_offsets([PART])
    assert stale.closed

    assert keeper.committed_offsets([PART]) == {PART: 7}
    assert keeper.committed_offsets([PART]) == {PART: 7}, "a working client is kept"
