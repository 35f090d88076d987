"""The worker-facing fidelity service: glossary lookup and versions, digests, rejections."""

from __future__ import annotations

import asyncio

import pytest
import redis

from pipeline.contract.messages import GlossaryTerm, TranslationRequest, TranslationResult
from pipeline.fidelity.glossary import Term
from pipeline.fidelity.glossary_store import GlossaryCache, GlossaryUnavailable, StoredGlossary
from pipeline.fidelity.prepare import FidelityConfig
from pipeline.fidelity.restore import Restored
from pipeline.fidelity.service import FidelityService, Rejected, result_fields
from tests.fakes import FakeClock
from tests.unit.fidelity_fakes import AligningPseudoTranslator


class FakeStore:
    """Glossary versions by (tenant, pair, name); ``down`` makes reads fail like Redis."""

    def __init__(self) -> None:
        self.versions: dict[tuple[str, str, str], StoredGlossary] = {}
        self.reads = 0
        self.down = False

    def put(self, name: str, terms: list[Term]) -> None:
        key = ("acme", "en_en-XA", name)
        version = self.versions[key].version + 1 if key in self.versions else 1
        self.versions[key] = StoredGlossary(*key, version, 0, tuple(terms))

    def load(self, tenant: str, pair: str, name: str) -> StoredGlossary | None:
        self.reads += 1
        if self.down:
            raise redis.ConnectionError("down")
        return self.versions.get((tenant, pair, name))


def request(**fields) -> TranslationRequest:
    base = {
        "request_id": "r",
        "source_lang": "en",
        "target_lang": "en-XA",
        "submitted_at": 1,
        "tenant": "acme",
        "text": "Take Kafka to the train station.",
    }
    return TranslationRequest(**{**base, **fields})


@pytest.fixture
def store() -> FakeStore:
    s = FakeStore()
    s.put("brand", [Term("Kafka"), Term("train station", "Ɓahnhof")])
    return s


def service(store: FakeStore, clock: FakeClock) -> FidelityService:
    return FidelityService(FidelityConfig(), GlossaryCache(store.load, 2.0, clock))


def test_named_glossary_is_applied_and_reported(store):
    svc = service(store, FakeClock(0.0))
    req = request(glossary="brand")
    glossary = svc.glossary(req)
    assert glossary is not None and not isinstance(glossary, Rejected)
    prepared = svc.prepare(req, glossary)
    assert not isinstance(prepared, Rejected)
    (out,) = asyncio.run(svc.restore([prepared], AligningPseudoTranslator(), req.pair))
    assert isinstance(out, Restored)
    assert out.text == "Ţáķé Kafka ţö ţĥé Ɓahnhof."
    result = TranslationResult.for_request(req, status="ok", **result_fields(out, glossary))
    assert result.glossary_version == 1
    assert [(h.source, h.target, h.count) for h in result.glossary_hits or []] == [
        ("Kafka", None, 1),
        ("train station", "Ɓahnhof", 1),
    ]


def test_new_version_is_picked_up_after_the_refresh_interval_and_changes_the_digest(store):
    clock = FakeClock(0.0)
    svc = service(store, clock)
    req = request(glossary="brand")
    first = svc.glossary(req)
    assert not isinstance(first, Rejected) and first is not None
    store.put("brand", [Term("Kafka", "Ķafka")])
    assert svc.glossary(req) is first  # still within the refresh interval: no Redis read
    clock.now = 2.5
    second = svc.glossary(req)
    assert not isinstance(second, Rejected) and second is not None and second.version == 2
    assert svc.digest(req, "m", first) != svc.digest(req, "m", second)
    # the same version is not recompiled on every refresh
    clock.now = 5.0
    assert svc.glossary(req) is second


def test_inline_terms_win_and_a_missing_glossary_is_rejected(store):
    svc = service(store, FakeClock(0.0))
    req = request(glossary="brand", terms=[GlossaryTerm(source="Kafka", target="Ķ")])
    glossary = svc.glossary(req)
    assert not isinstance(glossary, Rejected) and glossary is not None
    assert [m.replacement for m in glossary.find("Kafka")] == ["Ķ"]
    missing = svc.glossary(request(glossary="nope"))
    assert isinstance(missing, Rejected) and missing.reason == "glossary_not_found"


def test_redis_down_uses_the_copy_held_else_is_transient(store):
    clock = FakeClock(0.0)
    svc = service(store, clock)
    held = svc.glossary(request(glossary="brand"))
    store.down = True
    clock.now = 10.0
    assert svc.glossary(request(glossary="brand")) is held
    with pytest.raises(GlossaryUnavailable):
        svc.glossary(request(glossary="other"))


def test_bad_markup_is_rejected_with_its_reason(store):
    svc = service(store, FakeClock(0.0))
    out = svc.prepare(request(text="<p>Hello <b>world</p>", format="html"), None)
    assert isinstance(out, Rejected) and out.reason == "bad_markup"
    assert "unexpected-end-tag" in out.message


def test_digest_covers_format_and_terms(store):
    plain = request()
    variants = [plain, request(format="html"), request(terms=[GlossaryTerm(source="Kafka")])]
    digests = {FidelityService.digest(r, "m", None) for r in variants}
    assert len(digests) == 3
