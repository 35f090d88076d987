"""Reply topics: a ``translate`` call or a bulk job reads only its own results.

Requests carry ``reply_to``; the worker publishes each result to the shared
``translate.results`` (which the SLA job and other consumers read) *and* to
the request's reply topic, so a client no longer scans everyone's results.
A reply topic is either ephemeral (``translate.replies.<random>``, created
for one call or job with a short retention and deleted when it is done) or
a fixed per-client name (created once, kept, its retention bounding its size).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType

from pipeline.contract.messages import TOPIC_PATTERN
from pipeline.kafka.check import admin_client
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import KafkaSettings, ReplySettings

log = logging.getLogger(__name__)


def ephemeral_name(replies: ReplySettings, label: str | None = None) -> str:
    """A fresh reply topic name (``label`` makes it recognisable, e.g. a bulk job id)."""
    suffix = uuid.uuid4().hex[:16]
    return f"{replies.prefix}{label}.{suffix}" if label else f"{replies.prefix}{suffix}"


class ReplyTopic:
    """One reply topic, created on entry; deleted on exit when ``ephemeral``."""

    def __init__(
        self, kafka: KafkaSettings, replies: ReplySettings, name: str, *, ephemeral: bool
    ) -> None:
        if not re.match(TOPIC_PATTERN, name):
            raise ValueError(f"invalid reply topic name {name!r}")
        self.name = name
        self.ephemeral = ephemeral
        self._kafka = kafka
        self._spec = TopicSpec(replies.partitions, {"retention.ms": str(replies.retention_ms)})

    @classmethod
    def for_call(
        cls,
        kafka: KafkaSettings,
        replies: ReplySettings,
        name: str | None = None,
        label: str | None = None,
    ) -> ReplyTopic:
        """``name`` given: that (kept) topic; else an ephemeral one."""
        if name:
            return cls(kafka, replies, name, ephemeral=False)
        return cls(kafka, replies, ephemeral_name(replies, label), ephemeral=True)

    def create(self) -> ReplyTopic:
        """Create the topic if it is missing (idempotent)."""
        ensure_topics(self._kafka, {self.name: self._spec})
        return self

    def delete(self) -> None:
        """Delete the topic (a missing topic is fine)."""
        from kafka.errors import UnknownTopicOrPartitionError

        admin = admin_client(self._kafka, "replies")
        try:
            with contextlib.suppress(UnknownTopicOrPartitionError):
                admin.delete_topics([self.name])
        finally:
            admin.close()

    def __enter__(self) -> ReplyTopic:
        return self.create()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.ephemeral:
            try:
                self.delete()
            except Exception as error:  # never mask the call's own outcome
                log.warning("could not delete reply topic %s: %s", self.name, error)


class ReplyTopicCheck:
    """Which reply topics exist, from a topic listing at most ``refresh_s`` old.

    A name the listing does not know is listed again at once: a caller creates
    its topic just before it sends, and its first result must not be missed.

    A worker copies a result to its reply topic only when the topic exists:
    a client may delete its topic while results are still on their way, and
    producing to a missing topic would either auto-create it (with the
    broker's defaults, never deleted) or wait for metadata until a timeout.
    The result itself is always on the shared results topic.
    """

    def __init__(
        self,
        list_topics: Callable[[], Awaitable[set[str]]],
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_topics = list_topics
        self._refresh_s = refresh_s
        self._clock = clock
        self._known: set[str] = set()
        self._listed_at: float | None = None

    async def existing(self, names: set[str]) -> set[str]:
        """Those of ``names`` that exist (as of a listing at most ``refresh_s`` old)."""
        if not names:
            return set()
        now = self._clock()
        stale = self._listed_at is None or now - self._listed_at >= self._refresh_s
        if stale or not names <= self._known:
            self._known = await self._list_topics()
            self._listed_at = now
        return names & self._known
