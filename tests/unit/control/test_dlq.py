"""Choosing and preparing dead letters for replay (no Kafka)."""

from __future__ import annotations

import json

from pipeline.contract.codec import (
    Accepted,
    RecordRef,
    decode_original,
    decode_request,
    encode_bytes,
)
from pipeline.contract.codec import dead_letter as make_dead_letter
from pipeline.contract.messages import DeadLetterReason, ReplayMarker
from pipeline.control.dead_letters import LetterFilter, StoredLetter, dead_letter_id, plan_replay
from pipeline.settings import LimitSettings

LIMITS = LimitSettings()
NOW = 1_700_000_000_000


def request_doc(**changes: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "request_id": "r-1",
        "source_lang": "en",
        "target_lang": "de",
        "text": "Hello",
        "submitted_at": NOW - 3_600_000,
    }
    doc.update(changes)
    return doc


def letter(
    value: bytes,
    reason: DeadLetterReason = "invalid",
    offset: int = 7,
    key: bytes | None = b"en_de",
) -> StoredLetter:
    ref = RecordRef("translate.requests", 2, offset)
    return StoredLetter(make_dead_letter(ref, key, value, reason, "refused"))


def test_ids_name_the_refused_record() -> None:
    assert letter(b"{").id == "translate.requests:2:7"
    assert dead_letter_id(letter(b"{").letter) == letter(b"{").id


def test_original_bytes_are_replayed_untouched_with_their_key() -> None:
    value = json.dumps(request_doc()).encode()
    plan = plan_replay([letter(value)], {}, LIMITS)
    (replay,) = plan.replays
    assert (replay.key, replay.value, replay.rewritten) == (b"en_de", value, False)


def test_binary_originals_survive_base64() -> None:
    raw = b"\xff\xfe\x00binary"
    text, encoding = encode_bytes(raw)
    assert encoding == "base64" and decode_original(text, encoding) == raw


def test_letters_replayed_before_or_twice_in_the_dlq_go_once() -> None:
    value = json.dumps(request_doc()).encode()
    marker = ReplayMarker(
        dead_letter_id="translate.requests:2:8", replayed_at=1, topic="translate.requests"
    )
    plan = plan_replay(
        [letter(value, offset=7), letter(value, offset=7), letter(value, offset=8)],
        {marker.dead_letter_id: marker},
        LIMITS,
    )
    assert [r.letter_id for r in plan.replays] == ["translate.requests:2:7"]
    assert plan.already == ["translate.requests:2:8"]


def test_letters_that_would_fail_again_are_refused() -> None:
    plan = plan_replay([letter(b"{nope", "not_json")], {}, LIMITS)
    assert not plan.replays
    assert "not_json" in plan.refused["translate.requests:2:7"]


def test_fix_limits_clamps_the_timeout_and_keeps_the_rest() -> None:
    tight = LimitSettings(max_timeout_ms=60_000)
    value = json.dumps(request_doc(timeout_ms=3_000_000)).encode()
    assert not plan_replay([letter(value, "limit_exceeded")], {}, tight).replays
    (replay,) = plan_replay([letter(value, "limit_exceeded")], {}, tight, fix_limits=True).replays
    fixed = json.loads(replay.value)
    assert fixed == request_doc(timeout_ms=60_000) and replay.rewritten
    assert isinstance(
        decode_request(replay.key, replay.value, RecordRef("t", 0, 0), tight), Accepted
    )


def test_texts_over_the_limit_cannot_be_fixed() -> None:
    value = json.dumps(request_doc(text="é" * 9000)).encode()
    plan = plan_replay([letter(value, "limit_exceeded")], {}, LIMITS, fix_limits=True)
    assert not plan.replays and "limit_exceeded" in plan.refused["translate.requests:2:7"]


def test_restamp_moves_the_deadline_to_the_replay() -> None:
    value = json.dumps(request_doc()).encode()
    (replay,) = plan_replay([letter(value)], {}, LIMITS, restamp_at=NOW).replays
    assert json.loads(replay.value)["submitted_at"] == NOW


def test_filter_by_reason_time_and_id() -> None:
    a = letter(b"{", "not_json", offset=1).letter
    b = letter(b"{}", "invalid", offset=2).letter
    assert LetterFilter(reasons=["invalid"])(b) and not LetterFilter(reasons=["invalid"])(a)
    assert LetterFilter(ids=["translate.requests:2:1"])(a)
    assert not LetterFilter(ids=["translate.requests:2:1"])(b)
    assert LetterFilter(since_ms=a.received_at)(a)
    assert not LetterFilter(since_ms=a.received_at + 1)(a)
