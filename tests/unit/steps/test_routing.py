"""Router decisions: one outgoing record per input, plus a reply for a dead letter's sender."""

from __future__ import annotations

import json

import pytest

from pipeline.contract.codec import RecordRef
from pipeline.contract.messages import DeadLetter, TranslationRequest, TranslationResult, now_ms
from pipeline.contract.pairs import Pair
from pipeline.detect import Detection
from pipeline.routing import Outgoing, Router
from pipeline.settings import LimitSettings

REF = RecordRef("translate.requests", 0, 1)
SERVED = {"en_en-XA": "demo-v1", "en-XA_en": "demo-v1", "en_de": "opus-mt-en-de"}


def model_of(pair: Pair) -> str | None:
    return SERVED.get(pair.id)


ROUTER = Router(model_of, LimitSettings(default_timeout_ms=1234), hint=" (add a model)")


def request(**changes: object) -> bytes:
    doc = {
        "request_id": "r",
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": "Hi",
        "submitted_at": 5,
        **changes,
    }
    return json.dumps(doc).encode()


def route_one(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None = None
) -> Outgoing:
    (out,) = ROUTER.route(key, value, REF, headers or [])
    return out


def test_valid_request_goes_to_its_models_work_topic_keyed_by_digest() -> None:
    out = route_one(b"en_en-XA", request(), [("traceparent", b"00-x")])
    assert (out.kind, out.topic) == ("routed", "translate.work.demo-v1")
    assert out.key is not None and len(out.key) == 32
    assert out.headers == [("traceparent", b"00-x")]
    forwarded = TranslationRequest.from_json(out.value)
    assert forwarded.timeout_ms == 1234


def test_same_text_same_key_other_tenant_other_key() -> None:
    a = route_one(None, request(request_id="a"))
    b = route_one(None, request(request_id="b"))
    c = route_one(None, request(request_id="c", tenant="acme"))
    assert a.key == b.key != c.key
    # both directions of one model meet on its topic; another model's pair does not
    back = route_one(None, request(source_lang="en-XA", target_lang="en"))
    other = route_one(None, request(target_lang="de"))
    assert back.topic == a.topic != other.topic == "translate.work.opus-mt-en-de"


def test_bulk_request_goes_to_its_models_bulk_topic() -> None:
    out = route_one(None, request(job_id="j", doc_id="d", segment_index=3))
    assert out.topic == "translate.work-bulk.demo-v1"


def test_unsupported_pair_gets_error_result() -> None:
    out = route_one(None, request(target_lang="fr", request_id="x"))
    assert (out.kind, out.topic, out.key) == ("unsupported", "translate.results", b"x")
    result = TranslationResult.from_json(out.value)
    assert (result.status, result.reason) == ("error", "unsupported_pair")
    assert result.error == "no model serves pair en_fr (add a model)"


def test_error_results_go_to_the_shared_topic_and_carry_their_reply_topic() -> None:
    out = route_one(None, request(target_lang="fr", reply_to="my.replies"))
    assert (out.topic, out.reply_to) == ("translate.results", "my.replies")


@pytest.mark.parametrize(
    "value",
    [
        b"nope",
        b"[1, 2]",
        b"\xff\xfe",
        None,
        request(request_id=""),
        request(request_id=7),
        json.dumps({"text": "no id at all"}).encode(),
    ],
)
def test_invalid_without_usable_id_goes_to_dlq_only(value: bytes | None) -> None:
    out = route_one(b"k", value)
    assert (out.kind, out.topic, out.key) == ("dead_letter", "translate.dlq", b"k")


def test_invalid_goes_to_dlq_with_original_key_and_bytes() -> None:
    out = route_one(b"k", b"nope")
    assert DeadLetter.from_json(out.value).value == "nope"


def test_request_over_a_limit_is_dead_lettered_and_its_sender_told_why() -> None:
    text = "é" * 9000  # 9,000 characters (under the schema's 16,384), 18,000 bytes of UTF-8
    value = request(request_id="big", text=text, tenant="acme", reply_to="my.replies")
    headers = [("traceparent", b"00-x")]
    letter, reply = ROUTER.route(b"en_en-XA", value, REF, headers)
    assert (letter.kind, letter.topic) == ("dead_letter", "translate.dlq")
    assert DeadLetter.from_json(letter.value).reason == "limit_exceeded"
    assert (reply.kind, reply.topic, reply.reply_to, reply.key, reply.headers) == (
        "rejected",
        "translate.results",
        "my.replies",
        b"big",
        headers,
    )
    result = TranslationResult.from_json(reply.value)
    assert (result.status, result.reason, result.pair, result.tenant) == (
        "error",
        "limit_exceeded",
        "en_en-XA",
        "acme",
    )
    assert "18000 bytes" in (result.error or "")
    assert result.submitted_at == 5 and result.latency_ms == result.completed_at - 5


def test_invalid_fields_of_a_rejected_request_are_replaced_or_left_out() -> None:
    before = now_ms()
    value = request(
        request_id="bad",
        source_lang="english",
        submitted_at="yesterday",
        tenant="x" * 100,
        reply_to="not a topic!",
        job_id="j",
    )
    letter, reply = ROUTER.route(None, value, REF, [])
    assert DeadLetter.from_json(letter.value).reason == "invalid"
    result = TranslationResult.from_json(reply.value)
    assert (result.source_lang, result.target_lang, result.pair) == ("und", "en-XA", "und_en-XA")
    assert result.submitted_at >= before and result.latency_ms == 0  # its own time was invalid
    assert (result.tenant, result.job_id, reply.topic, reply.reply_to) == (
        None,
        "j",
        "translate.results",
        None,
    )
    assert "source_lang" in (result.error or "") and result.reason == "invalid"


def test_unsupported_version_with_an_id_is_answered() -> None:
    _, reply = ROUTER.route(None, request(request_id="v2", schema_version=2), REF, [])
    assert TranslationResult.from_json(reply.value).reason == "unsupported_version"


def test_a_request_for_auto_is_routed_by_its_detected_language() -> None:
    asked: list[tuple[str, str]] = []

    def detect(text: str, target: str) -> Detection:
        asked.append((text, target))
        return Detection("en-XA" if "é" in text else None, 0.97 if "é" in text else 0.0)

    router = Router(model_of, LimitSettings(), detect=detect)
    (out,) = router.route(
        None, request(source_lang="auto", target_lang="en", text="Ĥéļļö"), REF, []
    )
    assert (out.kind, out.topic) == ("routed", "translate.work.demo-v1")
    sent = TranslationRequest.from_json(out.value)
    assert sent.source_lang == "en-XA" and sent.pair.id == "en-XA_en"
    assert sent.detected is not None and (sent.detected.language, sent.detected.confidence) == (
        "en-XA",
        0.97,
    )
    assert asked == [("Ĥéļļö", "en")]
    (unknown,) = router.route(None, request(source_lang="auto", text="12345"), REF, [])
    result = TranslationResult.from_json(unknown.value)
    assert (unknown.kind, result.status, result.reason) == (
        "unsupported",
        "error",
        "language_not_detected",
    )
    assert result.source_lang == "auto"


def test_a_request_for_auto_in_a_language_no_model_translates_is_answered_unsupported() -> None:
    router = Router(
        model_of, LimitSettings(), detect=lambda text, target: Detection("ru", 0.99, False)
    )
    (out,) = router.route(None, request(source_lang="auto", text="Привет, как дела?"), REF, [])
    result = TranslationResult.from_json(out.value)
    assert (out.kind, result.status, result.reason) == (
        "unsupported",
        "error",
        "unsupported_source",
    )
    assert result.error is not None and "detected as ru (confidence 0.99)" in result.error
