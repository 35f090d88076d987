"""hand off: the batch is done with the engine; its agent may start the next one."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields


class HandOff:
    """Tells the agent that this batch's engine calls are over.

    What follows (stores, publishing, replies) waits on Redis and Kafka, not
    on the engine, so the agent's next micro-batch can take its lookups and
    engine calls meanwhile instead of leaving the engine idle. Reads and sets
    nothing on the items; raises nothing. A batch retried after the hand-off
    runs the engine again, beside the next one (the engine gate orders the calls).
    """

    reads: ClassVar[Fields] = frozenset()
    sets: ClassVar[Fields] = frozenset()

    async def __call__(self, batch: Batch) -> None:
        batch.cues.hand_off()
