"""publish: produce the batch's records and wait until the broker has every one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from pipeline.kafka.records import Outgoing
from pipeline.steps.base import Batch, Fields


class Producer(Protocol):
    """Sends records and returns once the broker acknowledged all of them.

    Raises :class:`~pipeline.steps.base.TransientError` when any could not be
    delivered within the producer's timeout.
    """

    async def send_all(self, records: Sequence[Outgoing]) -> None: ...


class Publish:
    """Produces ``batch.outgoing``; only after it returns may the inputs be committed.

    Raises: :class:`~pipeline.steps.base.TransientError` (delivery failed).
    """

    reads: ClassVar[Fields] = frozenset({"outgoing"})
    sets: ClassVar[Fields] = frozenset()

    in_canary: ClassVar[bool] = False  # a canary is never published

    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    async def __call__(self, batch: Batch) -> None:
        await self._producer.send_all(batch.outgoing)
