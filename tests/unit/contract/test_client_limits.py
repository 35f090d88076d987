"""The client refuses what the router would dead-letter, before anything is sent."""

from __future__ import annotations

import pytest

from pipeline.client import RequestOptions, build_requests, check_own, check_sendable
from pipeline.contract.pairs import Pair
from pipeline.errors import EXIT_USAGE, ContractError, LimitExceeded
from pipeline.settings import LimitSettings

EN_XA = Pair("en", "en-XA")


def test_text_over_the_utf8_limit_under_the_schema_limit() -> None:
    # 15,200 characters (the schema allows 16,384), 30,400 bytes (the limit is 16,384)
    requests = build_requests(["fine", "é" * 15_200], EN_XA)
    with pytest.raises(LimitExceeded) as caught:
        check_sendable(requests, LimitSettings())
    assert str(caught.value) == (
        "text 2: text is 30400 bytes of UTF-8; the limit is 16384; nothing was sent"
    )
    assert caught.value.exit_code == EXIT_USAGE


def test_every_limit_is_checked() -> None:
    limits = LimitSettings(max_text_bytes=10, max_metadata_bytes=20, min_timeout_ms=500)
    check_sendable(build_requests(["0123456789"], EN_XA), limits)
    with pytest.raises(LimitExceeded, match="timeout_ms 200 is outside"):
        check_sendable(build_requests(["x"], EN_XA, RequestOptions(timeout_ms=200)), limits)
    with pytest.raises(LimitExceeded, match="metadata is"):
        check_sendable(
            build_requests(["x"], EN_XA, RequestOptions(metadata={"k": "v" * 30})), limits
        )


def test_schema_violations_are_one_line() -> None:
    with pytest.raises(ContractError) as caught:
        build_requests(["ok", "x" * 16_385], EN_XA)
    assert str(caught.value) == "text 2: text: String should have at most 16384 characters"
    with pytest.raises(ContractError, match=r"^text 1: tenant: String should have at most 64"):
        build_requests(["x"], EN_XA, RequestOptions(tenant="t" * 65))


def test_a_tenants_client_refuses_what_its_tenant_may_not_send() -> None:
    prefix = "translate.replies."
    # its own tenant, no tenant (the ingress gate stamps it), its own reply topics: sent
    check_own(build_requests(["a"], EN_XA, RequestOptions(tenant="acme")), "acme", prefix)
    check_own(build_requests(["a"], EN_XA), "acme", prefix)
    mine = RequestOptions(reply_to="translate.replies.acme.results")
    check_own(build_requests(["a"], EN_XA, mine), "acme", prefix)
    with pytest.raises(ContractError) as other_tenant:
        check_own(build_requests(["a"], EN_XA, RequestOptions(tenant="globex")), "acme", prefix)
    assert str(other_tenant.value) == (
        "text 1: names tenant 'globex', but this client is tenant 'acme''s; nothing was sent"
    )
    # a prefix of another tenant's name is not one's own: acme-x is not acme
    for topic in ("translate.replies.globex.results", "translate.replies.acme-x.results"):
        theirs = RequestOptions(reply_to=topic)
        with pytest.raises(ContractError, match="is not tenant 'acme''s"):
            check_own(build_requests(["a", "b"], EN_XA, theirs), "acme", prefix)
