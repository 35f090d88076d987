"""The hot path's ``Producer``, on Faust's producer: send, then wait for every ack."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import faust

from pipeline.kafka.records import Outgoing
from pipeline.steps.base import TransientError


class FaustProducer:
    """Produces records through the app's producer and waits for the broker's acks.

    A record not acknowledged within ``timeout_s`` (broker down, partition
    leaderless, topic missing) is a :class:`TransientError`: the batch is
    retried and its inputs are not committed.
    """

    def __init__(self, app: faust.App, timeout_s: float) -> None:
        self._app = app
        self._timeout_s = timeout_s
        self._topics: dict[str, faust.TopicT] = {}

    def _topic(self, name: str) -> faust.TopicT:
        if name not in self._topics:
            self._topics[name] = self._app.topic(name, key_type=bytes, value_type=bytes)
        return self._topics[name]

    async def send_all(self, records: Sequence[Outgoing]) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                acks = [
                    await self._topic(r.topic).send(
                        key=r.key, value=r.value, headers=r.headers, force=True
                    )
                    for r in records
                ]
                await asyncio.gather(*acks)
        except TimeoutError as exc:
            raise TransientError(
                f"{len(records)} records not acknowledged within {self._timeout_s:.0f}s"
            ) from exc
        except Exception as exc:
            raise TransientError(f"producing failed: {type(exc).__name__}: {exc}") from exc
