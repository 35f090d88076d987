"""Kafka records as the pipeline sees them: one consumed, and one to produce."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.contract.messages import Headers, TranslationResult
from pipeline.contract.pairs import RESULTS_TOPIC


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record as consumed: where it came from and its raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One record to produce; ``kind`` says what it is, for metrics (result, dead_letter,
    routed, unsupported, rejected); ``reply_to``: the reply topic a result is copied to
    after it is published (see :mod:`pipeline.steps.replies`)."""

    topic: str
    key: bytes | None
    # None: a tombstone (compacted control topics)
    value: bytes | None
    headers: Headers
    kind: str = "result"
    reply_to: str | None = None

    @classmethod
    def for_result(
        cls,
        result: TranslationResult,
        headers: Headers,
        kind: str = "result",
        reply_to: str | None = None,
    ) -> Outgoing:
        """A result: keyed by request id, on the shared results topic (every consumer of
        results, the SLA job first, reads them there), copied to ``reply_to`` if given."""
        return cls(
            RESULTS_TOPIC, result.request_id.encode(), result.to_json(), headers, kind, reply_to
        )
