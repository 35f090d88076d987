"""The hot path's ``Producer``, on Faust's producer: send, then wait for every ack."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import faust

from pipeline.kafka.records import Outgoing
from pipeline.steps.base import TransientError


class FaustProducer:
    """Produces records through the app's producer and waits for the broker's acks.

    The records go straight to the app's producer (``app.producer.send``), all of
    a batch before the first ack is awaited, so they leave in as few produce
    requests as the partitions allow. Faust's ``Topic.send`` would add a future,
    a buffer hop and its sensors per record: about a third of the event loop's
    time per request (``babelstream bench hotpath``).

    A record not acknowledged within ``timeout_s`` (broker down, partition
    leaderless, topic missing) is a :class:`TransientError`: the batch is
    retried and its inputs are not committed.
    """

    def __init__(self, app: faust.App, timeout_s: float) -> None:
        self._app = app
        self._timeout_s = timeout_s

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                producer = await self._app.maybe_start_producer()  # started: returns at once
                # in order: a partition's records are appended as they are listed
                acks = [
                    await producer.send(r.topic, r.key, r.value, None, None, r.headers)
                    for r in records
                ]
                await asyncio.gather(*acks)
        except TimeoutError as exc:
            raise TransientError(
                f"{len(records)} records not acknowledged within {self._timeout_s:.0f}s"
            ) from exc
        except Exception as exc:
            raise TransientError(f"producing failed: {type(exc).__name__}: {exc}") from exc
