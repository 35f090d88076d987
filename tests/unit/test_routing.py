"""Router decisions: exactly one outgoing record per input."""

from __future__ import annotations

import json

from pipeline.codec import RecordRef
from pipeline.messages import DeadLetter, TranslationRequest, TranslationResult
from pipeline.routing import Router
from pipeline.settings import LimitSettings

REF = RecordRef("translate.requests", 0, 1)
ROUTER = Router({"en_en-XA": "demo-v1"}, LimitSettings(default_timeout_ms=1234))


def request(**changes: object) -> bytes:
    doc = {"request_id": "r", "source_lang": "en", "target_lang": "en-XA", "text": "Hi",
           "submitted_at": 5, **changes}
    return json.dumps(doc).encode()


def test_valid_request_goes_to_pair_topic_keyed_by_digest() -> None:
    out = ROUTER.route(b"en_en-XA", request(), REF, [("traceparent", b"00-x")])
    assert (out.kind, out.topic) == ("routed", "translate.requests.en_en-XA")
    assert out.key is not None and len(out.key) == 32
    assert out.headers == [("traceparent", b"00-x")]
    forwarded = TranslationRequest.from_json(out.value)
    assert forwarded.timeout_ms == 1234


def test_same_text_same_key_other_tenant_other_key() -> None:
    a = ROUTER.route(None, request(request_id="a"), REF, [])
    b = ROUTER.route(None, request(request_id="b"), REF, [])
    c = ROUTER.route(None, request(request_id="c", tenant="acme"), REF, [])
    assert a.key == b.key != c.key


def test_bulk_request_goes_to_bulk_topic() -> None:
    out = ROUTER.route(None, request(job_id="j", doc_id="d", segment_index=3), REF, [])
    assert out.topic == "translate.bulk.en_en-XA"


def test_unsupported_pair_gets_error_result() -> None:
    out = ROUTER.route(None, request(target_lang="de", request_id="x"), REF, [])
    assert (out.kind, out.topic, out.key) == ("unsupported", "translate.results", b"x")
    result = TranslationResult.from_json(out.value)
    assert (result.status, result.reason) == ("error", "unsupported_pair")
    assert "en_de" in (result.error or "")


def test_reply_to_is_honoured_for_error_results() -> None:
    out = ROUTER.route(None, request(target_lang="de", reply_to="my.replies"), REF, [])
    assert out.topic == "my.replies"


def test_invalid_goes_to_dlq_with_original_key() -> None:
    out = ROUTER.route(b"k", b"nope", REF, [])
    assert (out.kind, out.topic, out.key) == ("dead_letter", "translate.dlq", b"k")
    assert DeadLetter.from_json(out.value).value == "nope"
