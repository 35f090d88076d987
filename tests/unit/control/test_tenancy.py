"""A tenant's own ingress: requests stamped with the topic's tenant, or refused with a reason;
a tenant's ACLs reach its own topics and no others."""

from __future__ import annotations

import json

import pytest
from kafka.admin import ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourceType

from pipeline.contract.codec import RecordRef
from pipeline.contract.messages import (
    CancelRequest,
    DeadLetter,
    TranslationRequest,
    TranslationResult,
)
from pipeline.contract.pairs import (
    CANCEL_TOPIC,
    DLQ_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    default_reply_topic,
    ingress_tenant,
    tenant_ingress_topic,
)
from pipeline.control.tenancy import TenantAdmission
from pipeline.errors import ContractError
from pipeline.kafka.tenants import tenant_acls, tenant_user
from pipeline.settings import ReplySettings

PREFIX = ReplySettings().prefix
ACME = tenant_ingress_topic("acme")
HEADERS = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]


def request(**fields: object) -> bytes:
    body = {
        "request_id": "r-1",
        "source_lang": "en",
        "target_lang": "de",
        "text": "Hello",
        "submitted_at": 1_700_000_000_000,
        **fields,
    }
    return json.dumps(body).encode()


def admit(value: bytes | None, topic: str = ACME) -> list:
    return TenantAdmission(PREFIX, "w1").admit(b"k", value, RecordRef(topic, 2, 41), HEADERS)


def test_a_request_gets_the_tenant_of_its_topic_and_a_reply_topic_of_its_own():
    (out,) = admit(request())
    assert (out.topic, out.key, out.headers, out.kind) == (
        REQUESTS_TOPIC,
        b"k",
        HEADERS,
        "forwarded",
    )
    sent = TranslationRequest.model_validate_json(out.value)
    assert sent.tenant == "acme"
    assert sent.reply_to == default_reply_topic(PREFIX, "acme") == "translate.replies.acme.results"
    assert (sent.request_id, sent.text) == ("r-1", "Hello")


def test_a_request_naming_its_own_tenant_and_reply_topic_keeps_them():
    (out,) = admit(request(tenant="acme", reply_to="translate.replies.acme.call-7"))
    sent = TranslationRequest.model_validate_json(out.value)
    assert (sent.tenant, sent.reply_to) == ("acme", "translate.replies.acme.call-7")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"tenant": "globex"}, "tenant_mismatch"),
        ({"tenant": "globex", "reply_to": "translate.replies.globex.results"}, "tenant_mismatch"),
        ({"reply_to": "translate.replies.globex.results"}, "reply_topic_not_owned"),
        # a prefix of the tenant's name is not its prefix
        ({"reply_to": "translate.replies.acmes.results"}, "reply_topic_not_owned"),
        ({"reply_to": "translate.results"}, "reply_topic_not_owned"),
    ],
)
def test_a_request_naming_another_tenant_or_its_reply_topic_is_refused(fields, reason):
    value = request(**fields)
    letter_out, result_out = admit(value)
    assert letter_out.topic == DLQ_TOPIC
    letter = DeadLetter.model_validate_json(letter_out.value)
    assert letter.reason == reason and "acme" in letter.error
    assert (letter.source_topic, letter.partition, letter.offset) == (ACME, 2, 41)
    assert letter.value == value.decode()  # the original bytes, for the operator
    # the sender hears why, on its own reply topic, never on the one it named
    assert (result_out.topic, result_out.reply_to) == (
        RESULTS_TOPIC,
        "translate.replies.acme.results",
    )
    result = TranslationResult.model_validate_json(result_out.value)
    assert (result.status, result.reason, result.tenant) == ("error", reason, "acme")


def test_bytes_that_are_no_request_object_go_on_for_the_router_to_dead_letter():
    for value in (b"\xff\xfe", b"[1, 2]", b"not json", None):
        (out,) = admit(value)
        assert (out.topic, out.value) == (REQUESTS_TOPIC, value)


def test_only_a_tenants_ingress_is_admitted():
    with pytest.raises(ValueError, match="not a tenant's ingress"):
        admit(request(), topic=REQUESTS_TOPIC)


def test_tenant_names_cannot_reach_into_other_topics():
    assert ingress_tenant(ACME) == "acme"
    assert ingress_tenant(REQUESTS_TOPIC) is None
    assert ingress_tenant("translate.ingress.a.b") is None
    for bad in ("a.b", "", "x" * 65, "a/b"):
        with pytest.raises(ContractError, match="invalid tenant"):
            tenant_ingress_topic(bad)


def test_a_tenants_acls_allow_its_own_topics_and_nothing_else():
    acls = tenant_acls("acme", ReplySettings())
    assert {a.principal for a in acls} == {f"User:{tenant_user('acme')}"} == {"User:tenant-acme"}
    assert {a.permission_type for a in acls} == {ACLPermissionType.ALLOW}
    grants = {
        (a.resource_pattern.resource_type, a.resource_pattern.resource_name,
         a.resource_pattern.pattern_type, a.operation)
        for a in acls
    }  # fmt: skip
    topic, literal, prefixed = (
        ResourceType.TOPIC,
        ACLResourcePatternType.LITERAL,
        ACLResourcePatternType.PREFIXED,
    )
    assert grants == {
        (topic, "translate.ingress.acme", literal, ACLOperation.WRITE),
        (topic, "translate.ingress.acme", literal, ACLOperation.DESCRIBE),
        *(
            (topic, "translate.replies.acme.", prefixed, op)
            for op in (
                ACLOperation.READ,
                ACLOperation.DESCRIBE,
                ACLOperation.CREATE,
                ACLOperation.DELETE,
            )
        ),
    }


def test_a_cancel_on_a_tenants_ingress_covers_that_tenants_requests_only():
    cancel = json.dumps({"request_id": "r-1", "cancelled_at": 1_700_000_000_500}).encode()
    (out,) = admit(cancel)
    assert (out.topic, out.key, out.kind) == (CANCEL_TOPIC, b"tenant:acme:r-1", "cancel")
    sent = CancelRequest.model_validate_json(out.value)
    assert (sent.request_id, sent.tenant) == ("r-1", "acme")


def test_a_cancel_naming_another_tenant_or_no_target_is_a_dead_letter():
    other = json.dumps({"request_id": "r-1", "cancelled_at": 1, "tenant": "globex"}).encode()
    (letter,) = admit(other)
    assert (letter.topic, letter.kind) == (DLQ_TOPIC, "tenant_mismatch")
    assert "names tenant 'globex'" in DeadLetter.model_validate_json(letter.value).error
    (invalid,) = admit(json.dumps({"cancelled_at": 1}).encode())
    assert (invalid.topic, invalid.kind) == (DLQ_TOPIC, "invalid")
    assert "not a valid cancel" in DeadLetter.model_validate_json(invalid.value).error
