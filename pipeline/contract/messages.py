"""Wire contract as Python models.

These models and the JSON Schema files in ``schemas/`` (exported from them
with ``babelstream schemas export``) accept and reject the same documents;
``tests/unit/contract/test_contract.py`` runs shared samples through both. Limits that
depend on deployment settings (UTF-8 byte size of ``text``, metadata size)
are checked separately in :mod:`pipeline.contract.codec`, after the contract.

All times are epoch milliseconds (UTC).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.contract.pairs import Pair

SCHEMA_VERSION: Final = 1

# End of input in every engine: Python's `$` also matches before a trailing
# newline, ECMA-262's (JSON Schema) does not, so spell it as a lookahead.
_END = r"(?![\s\S])"
# BCP-47 language tag: language, optional script, optional region, variants.
# Deliberately a syntax check (the same regex in Python and JSON Schema).
BCP47_PATTERN = (
    r"^[A-Za-z]{2,3}(-[A-Za-z]{4})?(-([A-Za-z]{2}|[0-9]{3}))?"
    r"(-([A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3}))*" + _END
)
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}" + _END
MAX_TEXT_CHARS = 16 * 1024
MIN_TIMEOUT_MS = 100
MAX_TIMEOUT_MS = 3_600_000

LangTag = Annotated[str, Field(pattern=BCP47_PATTERN, max_length=35)]
Identifier = Annotated[str, Field(min_length=1, max_length=128)]
ShortLabel = Annotated[str, Field(min_length=1, max_length=64)]
EpochMs = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
Metadata = Annotated[
    dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=1024)]],
    Field(max_length=32),
]

Headers = list[tuple[str, bytes]]  # Kafka record headers (W3C trace context travels here)

# ok: translated; timeout: deadline passed before translation; error: failed for a reason
# of its own (input-caused); cancelled: its caller cancelled it before translation;
# rejected: refused by policy (e.g. a tenant quota), with retry_after_ms when retrying helps
Status = Literal["ok", "timeout", "error", "cancelled", "rejected"]
CacheLevel = Literal["miss", "l1", "l2", "window"]
# how the text is parsed: only text content (and translatable attributes) is translated
TextFormat = Literal["text", "html", "xml", "markdown"]
# exact: placeholders kept by the model; aligned: put back by attention; fallback: node by node
Fidelity = Literal["exact", "aligned", "fallback"]
MAX_INLINE_TERMS = 256
TermText = Annotated[str, Field(min_length=1, max_length=256)]


# the tenant of a request that names none (quotas, fair share, glossaries)
DEFAULT_TENANT: Final = "default"


def tenant_label(tenant: str | None) -> str:
    """The tenant a request counts for (requests without one share ``default``)."""
    return tenant or DEFAULT_TENANT


def now_ms() -> int:
    """Current wall-clock time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


class _Message(BaseModel):
    # strict: JSON types must match exactly ("5" is not an integer), as in JSON Schema.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, regex_engine="python-re")
    schema_name: ClassVar[str]
    # the version this code writes (and names its schema file by)
    wire_version: ClassVar[int] = SCHEMA_VERSION

    schema_version: Literal[1] = SCHEMA_VERSION

    def to_json(self) -> bytes:
        """Compact UTF-8 JSON, omitting unset optional fields."""
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Any:
        return cls.model_validate_json(data)


class GlossaryTerm(BaseModel):
    """An inline term: ``source`` is always translated as ``target``; no target: kept as is."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    source: TermText
    target: TermText | None = None


class GlossaryHit(BaseModel):
    """A term applied to a translation and how many times."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    source: TermText
    target: TermText | None = None
    count: Annotated[int, Field(ge=1)]


# source_lang of a request whose language the router detects (among the languages a model
# serves towards its target) before sending it on
AUTO_LANGUAGE: Final = "auto"


class SourceDetection(BaseModel):
    """The source language the router detected for a request sent with ``source_lang: auto``."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, regex_engine="python-re")

    language: LangTag
    confidence: Annotated[float, Field(ge=0.0, le=1.0)]


class TranslationRequest(_Message):
    """A request to translate one text (or one segment of a bulk document)."""

    schema_name: ClassVar[str] = "translation_request"

    request_id: Identifier
    # a BCP-47 tag, or "auto": the router detects it and records how sure it was
    source_lang: LangTag | Literal["auto"]
    target_lang: LangTag
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
    submitted_at: EpochMs
    timeout_ms: Annotated[int, Field(ge=MIN_TIMEOUT_MS, le=MAX_TIMEOUT_MS)] | None = None
    domain: ShortLabel | None = None
    tenant: ShortLabel | None = None
    job_id: Identifier | None = None
    doc_id: Identifier | None = None
    segment_index: Count | None = None
    reply_to: Annotated[str, Field(pattern=TOPIC_PATTERN)] | None = None
    metadata: Metadata | None = None
    # text (default), html, xml or markdown; markup is kept, text content translated
    format: TextFormat | None = None
    # a stored glossary of the tenant for this pair (babelstream glossary put)
    glossary: ShortLabel | None = None
    # terms for this request only, applied with (and before) the named glossary's
    terms: Annotated[list[GlossaryTerm], Field(max_length=MAX_INLINE_TERMS)] | None = None
    # set by the router when it detected the source language (source_lang was "auto")
    detected: SourceDetection | None = None

    @property
    def pair(self) -> Pair:
        return Pair(self.source_lang, self.target_lang)

    @property
    def is_bulk(self) -> bool:
        return self.job_id is not None

    def deadline_ms(self, default_timeout_ms: int) -> int:
        """Absolute deadline: ``submitted_at + timeout_ms`` (or the default)."""
        return self.submitted_at + (self.timeout_ms or default_timeout_ms)


class TranslationResult(_Message):
    """Exactly one logical result per accepted request."""

    schema_name: ClassVar[str] = "translation_result"

    request_id: Identifier
    source_lang: LangTag | Literal["auto"]
    target_lang: LangTag
    pair: Annotated[str, Field(min_length=3, max_length=71)]
    status: Status
    translation: str | None = None
    error: str | None = None
    # machine-readable cause of a non-ok status (limit_exceeded, bad_markup, quota_exceeded, ...)
    reason: ShortLabel | None = None
    retry_after_ms: Count | None = None
    model: str | None = None
    cache: CacheLevel | None = None
    submitted_at: EpochMs
    started_at: EpochMs | None = None
    completed_at: EpochMs
    latency_ms: Count
    batch_size: Count | None = None
    input_tokens: Count | None = None
    output_tokens: Count | None = None
    worker: str | None = None
    tenant: ShortLabel | None = None
    job_id: Identifier | None = None
    doc_id: Identifier | None = None
    segment_index: Count | None = None
    # how faithfully markup and placeholders were kept (ok results of the fidelity layer)
    fidelity: Fidelity | None = None
    glossary_hits: list[GlossaryHit] | None = None
    glossary_version: Count | None = None
    # the source language the router detected, when the request asked for "auto"
    detected: SourceDetection | None = None

    @classmethod
    def for_request(
        cls,
        request: TranslationRequest,
        *,
        status: Status,
        completed_at: int | None = None,
        **fields: Any,
    ) -> TranslationResult:
        """A result that carries the request's ids, pair and timing."""
        done = now_ms() if completed_at is None else completed_at
        return cls(
            request_id=request.request_id,
            source_lang=request.source_lang,
            target_lang=request.target_lang,
            pair=request.pair.id,
            status=status,
            submitted_at=request.submitted_at,
            completed_at=done,
            latency_ms=max(0, done - request.submitted_at),
            tenant=request.tenant,
            job_id=request.job_id,
            doc_id=request.doc_id,
            segment_index=request.segment_index,
            detected=request.detected,
            **fields,
        )


# internal_error: a request that made a step fail on its own while a canary request passed
# (the error holds the traceback, for operators); quarantined: one that broke the chain
# for the requests after it (see QuarantineRecord)
DeadLetterReason = Literal[
    "not_utf8",
    "not_json",
    "invalid",
    "limit_exceeded",
    "unsupported_version",
    "internal_error",
    "quarantined",
    # a tenant's own ingress: the request names another tenant, or a reply topic that
    # is not the tenant's
    "tenant_mismatch",
    "reply_topic_not_owned",
]
Encoding = Literal["utf8", "base64"]


class DeadLetter(_Message):
    """An input we could not accept, with why and the original bytes."""

    schema_name: ClassVar[str] = "dead_letter"

    reason: DeadLetterReason
    error: str
    source_topic: str
    partition: Count
    offset: Count
    key: str | None = None
    key_encoding: Encoding | None = None
    value: str | None = None
    value_encoding: Encoding | None = None
    received_at: EpochMs


Priority = Literal["interactive", "bulk"]
# The series that results of pairs no model serves are counted in (one, not one per typo).
UNSUPPORTED_SERIES = "unsupported"
# TranslationResult.reason of the router's answer to a pair no model serves
UNSUPPORTED_PAIR_REASON = "unsupported_pair"
SeriesId = Annotated[str, Field(min_length=3, max_length=71)]
NonNegative = Annotated[float, Field(ge=0)]


class SlaWindow(_Message):
    """Figures of one series (pair and priority class) over one event-time window.

    Version 2 added ``priority``, ``cancel_ratio``, ``rejected_ratio``,
    ``duplicates``, the objectives and burn rates; a version 1 document (the
    job before them) still reads, with those at their defaults.
    """

    schema_name: ClassVar[str] = "sla_window"
    wire_version: ClassVar[int] = 2

    schema_version: Literal[1, 2] = 2  # type: ignore[assignment]
    # a pair id, or "unsupported" for every pair no model serves
    pair: SeriesId
    priority: Priority = "interactive"
    window_start: EpochMs
    window_end: EpochMs
    # results counted once each (after de-duplication by request_id)
    count: Count
    p50_ms: Annotated[float, Field(ge=0)]
    p95_ms: Annotated[float, Field(ge=0)]
    p99_ms: Annotated[float, Field(ge=0)]
    timeout_ratio: Ratio
    error_ratio: Ratio
    cache_hit_ratio: Ratio
    cancel_ratio: Ratio = 0.0
    rejected_ratio: Ratio = 0.0
    # results dropped as repeats of a request_id already counted within the lateness
    duplicates: Count = 0
    # objective name -> target this window was held to (p95_ms, timeout_ratio, ...)
    objectives: dict[Annotated[str, Field(max_length=64)], NonNegative] = {}
    # objective name -> whether this window met it
    met: dict[Annotated[str, Field(max_length=64)], bool] = {}
    # error-budget burn rate (timeout ratio over the trailing hour / 6 hours of windows,
    # divided by the timeout_ratio objective); None without that objective
    burn_rate_1h: NonNegative | None = None
    burn_rate_6h: NonNegative | None = None


class Tick(_Message):
    """A worker's heartbeat: its clock, so event time moves without traffic (``pair``: one
    pair it serves).

    Published to ``translate.ticks`` (never to ``translate.results``) every
    ``worker.tick_interval_s``; the SLA job reads ticks with the results so
    its watermark advances while a pair is quiet.
    """

    schema_name: ClassVar[str] = "tick"

    worker: Identifier
    pair: Annotated[str, Field(min_length=3, max_length=71)]
    emitted_at: EpochMs


class LateResult(_Message):
    """A result the SLA job did not count because its window had closed (``translate.sla.late``)."""

    schema_name: ClassVar[str] = "late_result"

    request_id: Identifier
    pair: SeriesId
    priority: Priority
    status: Status
    latency_ms: Count
    completed_at: EpochMs
    # the closed window it missed (one record per window when windows slide)
    window_start: EpochMs
    window_end: EpochMs
    # the aggregation's watermark it was judged against, and how far behind it the result was
    watermark: EpochMs
    late_by_ms: Count


class CancelRequest(_Message):
    """Cancels one request, or every segment of one bulk job, not yet translated.

    Published to ``translate.cancel`` (compacted), keyed by the request id or
    ``job:<job id>``. It applies
    to requests submitted (``submitted_at``) up to ``cancelled_at``, so a bulk job
    rerun after a cancel, which reuses its segments' request ids, is translated.
    """

    schema_name: ClassVar[str] = "cancel_request"
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["request_id"], "properties": {"request_id": {"type": "string"}}},
                {"required": ["job_id"], "properties": {"job_id": {"type": "string"}}},
            ]
        }
    )

    request_id: Identifier | None = None
    job_id: Identifier | None = None
    cancelled_at: EpochMs
    # who or what asked (operator, client), for the result's error text
    requested_by: ShortLabel | None = None
    # only this tenant's requests: a tenant's own cancel, stamped from the ingress topic it
    # was written to (tenants.identity_from_topic); None: any tenant's (an operator's)
    tenant: ShortLabel | None = None

    @model_validator(mode="after")
    def _one_target(self) -> CancelRequest:
        if (self.request_id is None) == (self.job_id is None):
            raise ValueError("give exactly one of request_id and job_id")
        return self

    @property
    def key(self) -> str:
        """The record key: the request id, or ``job:<job id>``; a tenant's own cancel under
        ``tenant:<tenant>:`` before it, so it never replaces (or withdraws) another's."""
        target = (
            self.request_id if self.request_id is not None else job_cancel_key(self.job_id or "")
        )
        return target if self.tenant is None else f"{tenant_cancel_prefix(self.tenant)}{target}"

    def applies_to(self, request: TranslationRequest) -> bool:
        """Whether this cancel covers ``request``."""
        target = (
            request.request_id == self.request_id
            if self.request_id is not None
            else request.job_id == self.job_id
        )
        tenant = self.tenant is None or tenant_label(request.tenant) == self.tenant
        return target and tenant and request.submitted_at <= self.cancelled_at


# a tenant's own cancels' record keys: tenant:<tenant>:<request id, or job:<job id>>
TENANT_CANCEL = "tenant:"


def tenant_cancel_prefix(tenant: str) -> str:
    """What a tenant's own cancels' record keys start with."""
    return f"{TENANT_CANCEL}{tenant}:"


def job_cancel_key(job_id: str) -> str:
    """The cancel-topic key of a whole bulk job.

    Only compaction sees keys: a request id spelled exactly ``job:<job id>`` would
    share its key, and the later record of the two would replace the earlier.
    """
    return f"job:{job_id}"


class QuarantineRecord(_Message):
    """A consumed record that no worker may process again (``translate.quarantine``).

    Compacted, keyed by ``<source topic>:<partition>:<offset>``. A worker writes
    one when a record failed a step on its own and a canary request failed the
    same steps right after it: the record breaks the chain for what follows, so
    a replacement worker that reads it again must end it without running it.
    ``babelstream dlq quarantine release`` re-publishes the original bytes and
    writes a tombstone.
    """

    schema_name: ClassVar[str] = "quarantine_record"

    source_topic: str
    partition: Count
    offset: Count
    # suspect: it was in a batch during which the steps broke; a worker that reads it
    # again runs it alone between two canaries first. quarantined: it ends unrun.
    state: Literal["suspect", "quarantined"] = "quarantined"
    request_id: Identifier | None = None
    # the exception it raised, one line (its traceback is in the dead letter)
    error: str
    quarantined_at: EpochMs
    worker: str | None = None
    key: str | None = None
    key_encoding: Encoding | None = None
    value: str | None = None
    value_encoding: Encoding | None = None

    @property
    def record_id(self) -> str:
        """``<source topic>:<partition>:<offset>``: the record key (a dead letter's id too)."""
        return record_id(self.source_topic, self.partition, self.offset)


def record_id(topic: str, partition: int, offset: int) -> str:
    """A consumed record's id: ``<topic>:<partition>:<offset>``."""
    return f"{topic}:{partition}:{offset}"


class ReplayMarker(_Message):
    """A dead letter that ``babelstream dlq replay`` re-published (``translate.dlq.replayed``)."""

    schema_name: ClassVar[str] = "replay_marker"

    # <source topic>:<partition>:<offset> of the record that was dead-lettered
    dead_letter_id: Annotated[str, Field(min_length=1, max_length=300)]
    replayed_at: EpochMs
    topic: str
    # whether the replayed value was rewritten (--fix-limits / --restamp) or the original bytes
    rewritten: bool = False


MESSAGE_TYPES: tuple[type[_Message], ...] = (
    TranslationRequest,
    TranslationResult,
    DeadLetter,
    SlaWindow,
    CancelRequest,
    ReplayMarker,
    Tick,
    LateResult,
    QuarantineRecord,
)


def json_schema(model: type[_Message]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) document for one message type."""
    schema = model.model_json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://babelstream.dev/schemas/{model.schema_name}.v{model.wire_version}.json",
        **schema,
    }


def dump_schema(model: type[_Message]) -> str:
    return json.dumps(json_schema(model), indent=2, ensure_ascii=False) + "\n"
