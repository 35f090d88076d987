"""The JSON Schema files and the Python models accept and reject the same documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from pipeline.cli.commands.schemas import schema_path
from pipeline.contract.messages import (
    MESSAGE_TYPES,
    CancelRequest,
    DeadLetter,
    LateResult,
    ReplayMarker,
    SlaWindow,
    Tick,
    TranslationRequest,
    TranslationResult,
    dump_schema,
)
from pipeline.settings import PROJECT_ROOT

SCHEMA_DIR = PROJECT_ROOT / "schemas"

REQUEST = {
    "schema_version": 1,
    "request_id": "r-1",
    "source_lang": "en",
    "target_lang": "en-XA",
    "text": "Hello world",
    "submitted_at": 1_700_000_000_000,
}
RESULT = {
    "request_id": "r-1",
    "source_lang": "en",
    "target_lang": "de",
    "pair": "en_de",
    "status": "ok",
    "translation": "Hallo Welt",
    "cache": "l2",
    "submitted_at": 1,
    "completed_at": 5,
    "latency_ms": 4,
}
DEAD_LETTER = {
    "reason": "not_json",
    "error": "value is not JSON",
    "source_topic": "translate.requests",
    "partition": 0,
    "offset": 7,
    "value": "{oops",
    "value_encoding": "utf8",
    "received_at": 3,
}
CANCEL = {"request_id": "r-1", "cancelled_at": 5}
MARKER = {
    "dead_letter_id": "translate.requests:0:7",
    "replayed_at": 9,
    "topic": "translate.requests",
}
SLA = {
    "pair": "en_de",
    "window_start": 0,
    "window_end": 5000,
    "count": 10,
    "p50_ms": 12.0,
    "p95_ms": 40.5,
    "p99_ms": 41,
    "timeout_ratio": 0.1,
    "error_ratio": 0.0,
    "cache_hit_ratio": 1,
}
SLA_V2 = {
    **SLA,
    "schema_version": 2,
    "priority": "bulk",
    "cancel_ratio": 0.0,
    "rejected_ratio": 0.1,
    "duplicates": 3,
    "objectives": {"p95_ms": 1000.0, "timeout_ratio": 0.01},
    "met": {"p95_ms": True, "timeout_ratio": False},
    "burn_rate_1h": 2.5,
    "burn_rate_6h": 0.4,
}
TICK = {"worker": "worker-1", "pair": "en_de", "emitted_at": 1_700_000_000_000}
LATE = {
    "request_id": "r-1",
    "pair": "en_de",
    "priority": "interactive",
    "status": "ok",
    "latency_ms": 40,
    "completed_at": 1_700_000_004_000,
    "window_start": 1_700_000_000_000,
    "window_end": 1_700_000_005_000,
    "watermark": 1_700_000_009_000,
    "late_by_ms": 5000,
}


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    doc = {**base, **changes}
    return {k: v for k, v in doc.items() if v is not ...}


CASES: list[tuple[type, dict[str, Any], bool]] = [
    (TranslationRequest, REQUEST, True),
    (TranslationRequest, with_(REQUEST, schema_version=...), True),
    (TranslationRequest, with_(REQUEST, source_lang="zh-Hans", target_lang="sr-Latn-RS"), True),
    (TranslationRequest, with_(REQUEST, target_lang="de-CH-1996"), True),
    (TranslationRequest, with_(REQUEST, text=""), True),
    (TranslationRequest, with_(REQUEST, text="x" * 16384), True),
    (TranslationRequest, with_(REQUEST, timeout_ms=100, tenant="acme", domain="legal"), True),
    (TranslationRequest, with_(REQUEST, job_id="j", doc_id="d", segment_index=0), True),
    (TranslationRequest, with_(REQUEST, metadata={"k": "v"}, reply_to="my.replies"), True),
    (TranslationRequest, with_(REQUEST, request_id=...), False),
    (TranslationRequest, with_(REQUEST, text=...), False),
    (TranslationRequest, with_(REQUEST, request_id=""), False),
    (TranslationRequest, with_(REQUEST, source_lang="english"), False),
    (TranslationRequest, with_(REQUEST, source_lang="en_US"), False),
    (TranslationRequest, with_(REQUEST, source_lang="en\n"), False),
    (TranslationRequest, with_(REQUEST, target_lang=""), False),
    (TranslationRequest, with_(REQUEST, text="x" * 16385), False),
    (TranslationRequest, with_(REQUEST, text=5), False),
    (TranslationRequest, with_(REQUEST, submitted_at="1700000000000"), False),
    (TranslationRequest, with_(REQUEST, submitted_at=-1), False),
    (TranslationRequest, with_(REQUEST, timeout_ms=99), False),
    (TranslationRequest, with_(REQUEST, timeout_ms=3_600_001), False),
    (TranslationRequest, with_(REQUEST, timeout_ms=True), False),
    (TranslationRequest, with_(REQUEST, schema_version=2), False),
    (TranslationRequest, with_(REQUEST, metadata={"k": 1}), False),
    (TranslationRequest, with_(REQUEST, metadata={f"k{i}": "v" for i in range(33)}), False),
    (TranslationRequest, with_(REQUEST, reply_to="bad topic"), False),
    (TranslationRequest, with_(REQUEST, surprise="field"), False),
    (TranslationResult, RESULT, True),
    (TranslationResult, with_(RESULT, status="timeout", translation=None, cache=None), True),
    (TranslationResult, with_(RESULT, status="maybe"), False),
    (TranslationResult, with_(RESULT, cache="l3"), False),
    (TranslationResult, with_(RESULT, latency_ms=-1), False),
    (DeadLetter, DEAD_LETTER, True),
    (DeadLetter, with_(DEAD_LETTER, value_encoding="base64", value="AAE="), True),
    (DeadLetter, with_(DEAD_LETTER, reason="because"), False),
    (DeadLetter, with_(DEAD_LETTER, offset=...), False),
    (SlaWindow, SLA, True),
    (SlaWindow, with_(SLA, timeout_ratio=1.5), False),
    (SlaWindow, with_(SLA, p99_ms=-1), False),
    (CancelRequest, CANCEL, True),
    (CancelRequest, with_(CANCEL, request_id=..., job_id="job-1", requested_by="ops"), True),
    (CancelRequest, with_(CANCEL, request_id=None, job_id="job-1"), True),
    (CancelRequest, with_(CANCEL, job_id="job-1"), False),
    (CancelRequest, with_(CANCEL, request_id=...), False),
    (CancelRequest, with_(CANCEL, request_id=None), False),
    (CancelRequest, with_(CANCEL, cancelled_at=...), False),
    (CancelRequest, with_(CANCEL, request_id=""), False),
    (ReplayMarker, MARKER, True),
    (ReplayMarker, with_(MARKER, rewritten=True), True),
    (ReplayMarker, with_(MARKER, dead_letter_id=""), False),
    (ReplayMarker, with_(MARKER, replayed_at=-1), False),
    (SlaWindow, with_(SLA, schema_version=1), True),  # what the job wrote before v2
    (SlaWindow, SLA_V2, True),
    (SlaWindow, with_(SLA_V2, schema_version=3), False),
    (SlaWindow, with_(SLA_V2, priority="batch"), False),
    (SlaWindow, with_(SLA_V2, duplicates=-1), False),
    (SlaWindow, with_(SLA_V2, met={"p95_ms": "yes"}), False),
    (SlaWindow, with_(SLA_V2, burn_rate_1h=None), True),
    (SlaWindow, with_(SLA_V2, cancel_ratio=1.2), False),
    (Tick, TICK, True),
    (Tick, with_(TICK, emitted_at=...), False),
    (Tick, with_(TICK, worker=""), False),
    (LateResult, LATE, True),
    (LateResult, with_(LATE, status="cancelled"), True),
    (LateResult, with_(LATE, late_by_ms=-5), False),
    (LateResult, with_(LATE, watermark=...), False),
]


def load_schema(model: type) -> dict[str, Any]:
    return json.loads(schema_path(SCHEMA_DIR, model.schema_name, model.wire_version).read_text())


@pytest.mark.parametrize("model", MESSAGE_TYPES, ids=lambda m: m.__name__)
def test_committed_schema_matches_models(model: type) -> None:
    path: Path = schema_path(SCHEMA_DIR, model.schema_name, model.wire_version)
    assert path.read_text() == dump_schema(model), "run `babelstream schemas export`"


@pytest.mark.parametrize(("model", "doc", "valid"), CASES)
def test_schema_and_model_agree(model: type, doc: dict[str, Any], valid: bool) -> None:
    validator = jsonschema.Draft202012Validator(load_schema(model))
    schema_ok = validator.is_valid(doc)
    try:
        model.model_validate_json(json.dumps(doc))
        model_ok = True
    except ValidationError:
        model_ok = False
    assert (schema_ok, model_ok) == (valid, valid)


def test_round_trip_keeps_schema_version() -> None:
    request = TranslationRequest.model_validate(REQUEST)
    out = json.loads(request.to_json())
    assert out["schema_version"] == 1
    assert TranslationRequest.from_json(request.to_json()) == request
