"""replies: copy each published result to its caller's reply topic, while that topic exists."""

from __future__ import annotations

import asyncio
import logging
from typing import ClassVar

from pipeline.kafka.records import Outgoing
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.observability import metrics
from pipeline.steps.base import Batch, Fields
from pipeline.steps.publish import Producer

log = logging.getLogger(__name__)


class ReplyCopies:
    """After the batch is published: results with a ``reply_to`` go there too.

    Reads: ``batch.outgoing`` (results carry their ``reply_to``). Produces the
    copies to reply topics that exist (a listing at most a second old: a caller
    that gave up deletes its topic, and producing to it would re-create it or
    wait on it). Best effort: every result is already on the shared results
    topic, so a copy that fails within ``timeout_s`` is logged and counted
    (``babelstream_reply_copies_total{outcome}``), never retried, and never
    holds back the batch's commit. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"outgoing"})
    sets: ClassVar[Fields] = frozenset()

    in_canary: ClassVar[bool] = False  # a canary is never published

    def __init__(self, producer: Producer, topics: ReplyTopicCheck, timeout_s: float) -> None:
        self._producer = producer
        self._topics = topics
        self._timeout_s = timeout_s

    async def __call__(self, batch: Batch) -> None:
        wanted = [out for out in batch.outgoing if out.reply_to]
        if not wanted:
            return
        try:
            existing = await self._topics.existing({out.reply_to or "" for out in wanted})
        except Exception as exc:  # no listing: no copies this time
            log.warning("could not list reply topics: %s", exc)
            metrics.record_reply_copies("failed", len(wanted))
            return
        copies = [
            Outgoing(out.reply_to or "", out.key, out.value, out.headers, out.kind)
            for out in wanted
            if out.reply_to in existing
        ]
        metrics.record_reply_copies("gone", len(wanted) - len(copies))
        if not copies:
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._producer.send_all(copies)
        except Exception as exc:
            log.warning(
                "%d reply copies not delivered (results are on the shared topic): %s",
                len(copies),
                exc,
            )
            metrics.record_reply_copies("failed", len(copies))
            return
        metrics.record_reply_copies("copied", len(copies))
