"""Decoding requests from raw Kafka records, with errors as data.

``decode_request`` never raises for bad input: it returns either an
:class:`Accepted` request or a :class:`DeadLettered` record that already holds the
:class:`~pipeline.contract.messages.DeadLetter` to publish, with the original bytes.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from pydantic import ValidationError

from pipeline.contract.messages import (
    SCHEMA_VERSION,
    DeadLetter,
    DeadLetterReason,
    Encoding,
    TranslationRequest,
    now_ms,
)
from pipeline.settings import LimitSettings


@dataclass(frozen=True, slots=True)
class RecordRef:
    """Where a record came from."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Accepted:
    request: TranslationRequest


@dataclass(frozen=True, slots=True)
class DeadLettered:
    dead_letter: DeadLetter

    @property
    def reason(self) -> str:
        return self.dead_letter.reason


Decoded = Accepted | DeadLettered


def encode_bytes(data: bytes | None) -> tuple[str | None, Encoding | None]:
    """Original bytes for a dead letter: UTF-8 text when possible, else base64."""
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


def decode_original(text: str | None, encoding: Encoding | None) -> bytes | None:
    """Inverse of :func:`encode_bytes` (for replaying dead letters)."""
    if text is None:
        return None
    if encoding == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")


def dead_letter(
    ref: RecordRef, key: bytes | None, value: bytes | None, reason: DeadLetterReason, error: str
) -> DeadLetter:
    key_text, key_encoding = encode_bytes(key)
    value_text, value_encoding = encode_bytes(value)
    return DeadLetter(
        reason=reason,
        error=error,
        source_topic=ref.topic,
        partition=ref.partition,
        offset=ref.offset,
        key=key_text,
        key_encoding=key_encoding,
        value=value_text,
        value_encoding=value_encoding,
        received_at=now_ms(),
    )


def describe_validation(exc: ValidationError) -> str:
    """One line per problem: ``field: message``."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


# The schema's bounds that the deployment limits (LimitSettings) tighten: a request over
# one of them breaks a limit, like a request over the deployment limit itself.
_SCHEMA_LIMITS: dict[tuple[int | str, ...], set[str]] = {
    ("text",): {"string_too_long"},
    ("timeout_ms",): {"greater_than_equal", "less_than_equal"},
}


def over_schema_limits(exc: ValidationError) -> bool:
    """Whether every problem is a schema bound the deployment limits tighten."""
    return all(err["type"] in _SCHEMA_LIMITS.get(err["loc"], ()) for err in exc.errors())


def check_limits(request: TranslationRequest, limits: LimitSettings) -> str | None:
    """Deployment limits beyond the schema; returns the violation or None."""
    text_bytes = len(request.text.encode("utf-8"))
    if text_bytes > limits.max_text_bytes:
        return f"text is {text_bytes} bytes of UTF-8; the limit is {limits.max_text_bytes}"
    if request.timeout_ms is not None and not (
        limits.min_timeout_ms <= request.timeout_ms <= limits.max_timeout_ms
    ):
        return (
            f"timeout_ms {request.timeout_ms} is outside "
            f"[{limits.min_timeout_ms}, {limits.max_timeout_ms}]"
        )
    if request.metadata:
        size = len(json.dumps(request.metadata, ensure_ascii=False).encode())
        if size > limits.max_metadata_bytes:
            return f"metadata is {size} bytes as JSON; the limit is {limits.max_metadata_bytes}"
    return None


def decode_request(
    key: bytes | None, value: bytes | None, ref: RecordRef, limits: LimitSettings
) -> Decoded:
    """Bytes off the wire -> an accepted request or a dead letter with a reason."""

    def reject(reason: DeadLetterReason, error: str) -> DeadLettered:
        return DeadLettered(dead_letter(ref, key, value, reason, error))

    if value is None:
        return reject("not_json", "record has no value (tombstone)")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return reject("not_utf8", f"value is not UTF-8: {exc}")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        return reject("not_json", f"value is not JSON: {exc}")
    if not isinstance(document, dict):
        return reject("invalid", f"expected a JSON object, got {type(document).__name__}")
    version = document.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        return reject(
            "unsupported_version",
            f"schema_version {version!r} is not supported (this worker speaks {SCHEMA_VERSION})",
        )
    try:
        request = TranslationRequest.model_validate_json(text)
    except ValidationError as exc:
        reason: DeadLetterReason = "limit_exceeded" if over_schema_limits(exc) else "invalid"
        return reject(reason, describe_validation(exc))
    violation = check_limits(request, limits)
    if violation:
        return reject("limit_exceeded", violation)
    return Accepted(request)
