"""Decoding raw records: every bad input becomes a dead letter with a reason and its bytes."""

from __future__ import annotations

import base64
import json

import pytest

from pipeline.contract.codec import (
    Accepted,
    DeadLettered,
    RecordRef,
    decode_original,
    decode_request,
)
from pipeline.settings import LimitSettings

REF = RecordRef("translate.requests", 3, 42)
LIMITS = LimitSettings()
GOOD = {
    "request_id": "r1",
    "source_lang": "en",
    "target_lang": "en-XA",
    "text": "Hello",
    "submitted_at": 1,
}


def raw(**changes: object) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_accepts_valid_request() -> None:
    decoded = decode_request(b"en_en-XA", raw(), REF, LIMITS)
    assert isinstance(decoded, Accepted)
    assert decoded.request.pair.id == "en_en-XA"


@pytest.mark.parametrize(
    ("value", "reason", "fragment"),
    [
        (b"\xff\xfe not utf8", "not_utf8", "not UTF-8"),
        (b"{not json", "not_json", "not JSON"),
        (None, "not_json", "tombstone"),
        (b"[1, 2]", "invalid", "JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "text"}).encode(), "invalid", "text"),
        (raw(target_lang="xx_YY"), "invalid", "target_lang"),
        (raw(schema_version=9), "unsupported_version", "schema_version 9"),
        (raw(text="é" * 9000), "limit_exceeded", "18000 bytes"),
        (
            raw(
                metadata={
                    "k": "v" * 1000,
                    "k2": "v" * 1000,
                    "k3": "v" * 1000,
                    "k4": "v" * 1000,
                    "k5": "v" * 1000,
                }
            ),
            "limit_exceeded",
            "metadata",
        ),
    ],
)
def test_rejects_with_reason_and_original_bytes(
    value: bytes | None, reason: str, fragment: str
) -> None:
    decoded = decode_request(b"key", value, REF, LIMITS)
    assert isinstance(decoded, DeadLettered)
    letter = decoded.dead_letter
    assert letter.reason == reason
    assert fragment in letter.error
    assert (letter.source_topic, letter.partition, letter.offset) == (REF.topic, 3, 42)
    assert decode_original(letter.value, letter.value_encoding) == value
    assert decode_original(letter.key, letter.key_encoding) == b"key"


def test_non_utf8_bytes_are_kept_as_base64() -> None:
    decoded = decode_request(b"\x00\xff", b"\xff", REF, LIMITS)
    assert isinstance(decoded, DeadLettered)
    assert decoded.dead_letter.value_encoding == "base64"
    assert base64.b64decode(decoded.dead_letter.value or "") == b"\xff"
    assert decoded.dead_letter.key_encoding == "base64"


def test_configurable_text_limit() -> None:
    tight = LimitSettings(max_text_bytes=4)
    assert isinstance(decode_request(None, raw(text="four"), REF, tight), Accepted)
    assert isinstance(decode_request(None, raw(text="fivee"), REF, tight), DeadLettered)


@pytest.mark.parametrize(
    ("changes", "reason", "fragment"),
    [
        ({"text": "x" * 16_385}, "limit_exceeded", "text: String should have at most 16384"),
        ({"timeout_ms": 3_600_001}, "limit_exceeded", "timeout_ms: Input should be less"),
        ({"timeout_ms": 50, "text": "x" * 16_385}, "limit_exceeded", "timeout_ms:"),
        # a limit and a malformed field: invalid, naming both
        ({"text": "x" * 16_385, "target_lang": "xx_YY"}, "invalid", "target_lang"),
    ],
    ids=["text-over-16384-chars", "timeout-over-max", "both-limits", "limit-and-malformed"],
)
def test_the_schema_bounds_the_limits_tighten_are_limits(
    changes: dict[str, object], reason: str, fragment: str
) -> None:
    """Over the schema's own text and timeout bounds is limit_exceeded, as over the
    deployment limits (which tighten them) is, not invalid."""
    decoded = decode_request(b"key", raw(**changes), REF, LIMITS)
    assert isinstance(decoded, DeadLettered)
    assert decoded.dead_letter.reason == reason
    assert fragment in decoded.dead_letter.error
