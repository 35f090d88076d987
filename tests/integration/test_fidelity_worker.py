"""Text fidelity through the real worker: markup, placeholders, glossaries, failures.

Every request sent is accounted for by id; expected outputs come from the
en-XA character map (the demo model translates letter by letter).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from pipeline.cli.main import main
from pipeline.client import RequestOptions, TranslationClient, build_requests
from pipeline.contract.messages import TranslationResult
from pipeline.contract.pairs import Pair
from pipeline.fidelity.glossary import Term
from pipeline.fidelity.glossary_store import GlossaryStore
from pipeline.pseudo_locale import to_pseudo as xa
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import WorkerProcess

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log = PROJECT_ROOT / "var" / "log" / "test-fidelity-worker.log"
    with WorkerProcess(settings, log_path=log) as w:
        yield w


def translate(settings: Settings, texts: list[str], **options: object) -> list[TranslationResult]:
    requests = build_requests(texts, EN_XA, RequestOptions(**options))  # type: ignore[arg-type]
    with TranslationClient(settings.kafka) as client:
        replies = client.translate(requests, timeout_s=120)
    assert not replies.missing, f"no result for {replies.missing}"
    return [r for r in replies.ordered if r is not None]


def test_markup_placeholders_and_bad_markup_each_get_one_faithful_result(settings, worker):
    html = '<p>Hello <b>big <i>world</i></b>! <a href="/x" title="Go home">Click</a> &amp; go.</p>'
    expected = (
        f"<p>{xa('Hello')} <b>{xa('big')} <i>{xa('world')}</i></b>! "
        f'<a href="/x" title="{xa("Go home")}">{xa("Click")}</a> &amp; {xa("go")}.</p>'
    )
    (ok,) = translate(settings, [html], text_format="html")
    assert (ok.status, ok.translation, ok.fidelity) == ("ok", expected, "exact")
    (bad,) = translate(settings, ["<p>Hello <b>world</p></b>"], text_format="html")
    assert (bad.status, bad.reason) == ("error", "bad_markup")
    assert "unexpected-end-tag" in (bad.error or "")
    plain = translate(settings, ["Hi {name}, you have %d new {{things}} at https://x.io/a"])
    assert plain[0].translation == (
        f"{xa('Hi')} {{name}}, {xa('you have')} %d {xa('new')} {{{{things}}}} {xa('at')} "
        "https://x.io/a"
    )
    corrupt = translate(settings, ["Ünïcode café — naïve résumé 東京 🚆"])
    assert corrupt[0].status == "ok" and "\ufffd" not in (corrupt[0].translation or "")


def test_glossary_versions_are_picked_up_and_never_served_stale(settings, worker):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    store = GlossaryStore(settings.redis)
    store.put(tenant, EN_XA.id, "brand", [Term("Kafka"), Term("train station", "Bahnhof")])
    text = "Kafka waits at the train station."
    (first,) = translate(settings, [text], tenant=tenant, glossary="brand")
    assert first.translation == f"Kafka {xa('waits at the')} Bahnhof."
    assert first.glossary_version == 1
    assert {(h.source, h.count) for h in first.glossary_hits or []} == {
        ("Kafka", 1),
        ("train station", 1),
    }
    store.put(tenant, EN_XA.id, "brand", [Term("Kafka"), Term("train station", "Gare")])
    deadline = time.monotonic() + 20
    while True:  # within seconds, and never the cached text of version 1
        (again,) = translate(settings, [text], tenant=tenant, glossary="brand")
        if again.glossary_version == 2:
            break
        assert again.translation == first.translation
        assert time.monotonic() < deadline, "new glossary version not picked up"
        time.sleep(0.5)
    assert again.translation == f"Kafka {xa('waits at the')} Gare."
    (missing,) = translate(settings, [text], tenant=tenant, glossary="nope")
    assert (missing.status, missing.reason) == ("error", "glossary_not_found")
    store.close()


def test_a_glossary_named_without_a_tenant_is_the_default_tenants(settings, worker, tmp_path):
    """Valid by the contract: it ends at once with a clear result, and the pair serves on."""
    name = f"g-{uuid.uuid4().hex[:8]}"
    text = "Kafka at the train station"
    retried_before = worker.stats()["retried_attempts"]
    (missing,) = translate(settings, [text], glossary=name)
    assert (missing.status, missing.reason) == ("error", "glossary_not_found")
    assert "'default'" in (missing.error or "")
    assert worker.stats()["retried_attempts"] == retried_before, "answered at once, not retried"
    terms = tmp_path / "terms.tsv"
    terms.write_text("train station\tBahnhof\n", encoding="utf-8")
    put = CliRunner().invoke(
        main, ["glossary", "put", "--pair", EN_XA.id, "--name", name, str(terms)]
    )
    assert put.exit_code == 0 and json.loads(put.output)["tenant"] == "default", put.output
    deadline = time.monotonic() + 20
    while (found := translate(settings, [text], glossary=name)[0]).status != "ok":
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    assert found.translation == f"{xa('Kafka at the')} Bahnhof"
    plain = translate(settings, [f"Plain sentence {i}." for i in range(5)])
    assert {r.status for r in plain} == {"ok"}
