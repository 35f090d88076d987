"""Deterministic bulk request ids and the records a job publishes."""

from __future__ import annotations

import json

import pytest

from pipeline.bulk import BulkError
from pipeline.bulk.requests import (
    RequestTemplate,
    check_job_id,
    default_job_id,
    request_id,
    wire_doc_id,
)
from pipeline.contract.digest import content_digest, request_digest
from pipeline.contract.messages import TranslationRequest
from pipeline.contract.pairs import Pair

PAIR = Pair("en", "en-XA")


def test_request_ids_are_deterministic_and_distinct() -> None:
    ids = {request_id("job-1", doc, i) for doc in ("a", "b", "a/b.txt") for i in range(3)}
    assert len(ids) == 9
    assert request_id("job-1", "a", 2) == request_id("job-1", "a", 2)
    assert request_id("job-1", "a", 2) != request_id("job-2", "a", 2)
    assert request_id("job-1", "a", 2).startswith("job-1:") and request_id(
        "job-1", "a", 2
    ).endswith(":2")


def test_request_ids_fit_the_contract_whatever_the_doc_id() -> None:
    longest = request_id("j" * 64, "x" * 10_000, 2**40)
    assert len(longest) <= 128
    TranslationRequest(
        request_id=longest, source_lang="en", target_lang="de", text="x", submitted_at=0
    )


def test_wire_doc_id() -> None:
    assert wire_doc_id("doc-1") == "doc-1"
    assert wire_doc_id("").startswith("key:")
    assert wire_doc_id("x" * 129).startswith("key:")


def test_default_job_id_is_stable_and_depends_on_the_job() -> None:
    args = dict(id_column=None, text_column="text", tenant=None, domain=None)
    a = default_job_id(["/data/a.parquet"], PAIR, **args)
    assert a == default_job_id(["/data/a.parquet"], PAIR, **args)
    assert a != default_job_id(["/data/b.parquet"], PAIR, **args)
    assert a != default_job_id(["/data/a.parquet"], Pair("en-XA", "en"), **args)
    assert a != default_job_id(["/data/a.parquet"], PAIR, **{**args, "tenant": "t"})
    assert check_job_id(a) == a


@pytest.mark.parametrize("bad", ["", "-x", "a/b", "a:b", "x" * 65])
def test_bad_job_ids(bad: str) -> None:
    with pytest.raises(BulkError):
        check_job_id(bad)


def test_records_are_keyed_by_content_digest_like_the_router() -> None:
    template = RequestTemplate(job_id="job", pair=PAIR, model_id="m", timeout_ms=60_000, tenant="t")
    request = template.request("doc", 3, "Hello.", submitted_at=1000)
    key, value = template.record(request)
    assert key.decode() == request_digest(request, "m")
    assert key.decode() != content_digest(
        model_id="m", source_lang="en", target_lang="en-XA", text="Hello.", tenant="other"
    )
    sent = json.loads(value)
    assert sent["request_id"] == request_id("job", "doc", 3)
    assert (sent["job_id"], sent["doc_id"], sent["segment_index"]) == ("job", "doc", 3)
    assert sent["timeout_ms"] == 60_000
    assert TranslationRequest.from_json(value).is_bulk


def test_markup_jobs_carry_format_and_glossary_and_get_their_own_id() -> None:
    template = RequestTemplate(
        job_id="job",
        pair=PAIR,
        model_id="m",
        timeout_ms=60_000,
        tenant="t",
        text_format="html",
        glossary="brand",
    )
    request = template.request("doc", 0, "<p>Hello</p>", submitted_at=1000)
    assert (request.format, request.glossary) == ("html", "brand")
    plain = RequestTemplate(job_id="job", pair=PAIR, model_id="m", timeout_ms=60_000, tenant="t")
    plain_request = plain.request("doc", 0, "<p>Hello</p>", submitted_at=1000)
    assert "format" not in json.loads(plain_request.to_json())
    assert template.record(request)[0] != plain.record(plain_request)[0]
    common = {"id_column": None, "text_column": "text", "tenant": "t", "domain": None}
    assert default_job_id(["a"], PAIR, **common) != default_job_id(
        ["a"], PAIR, **common, text_format="html"
    )
