"""Restoration ladder and glossary terms, with the character map standing in for the model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.contract.pairs import Pair
from pipeline.engine.translator import AttentionBlock
from pipeline.fidelity.align import reinsert, strip_tokens
from pipeline.fidelity.document import Run, Span, literal_doc
from pipeline.fidelity.drive import TranslatorEngine, translate_text
from pipeline.fidelity.glossary import Glossary, Term
from pipeline.fidelity.quality import check_run, corrupted
from pipeline.fidelity.restore import Failed, Restored
from pipeline.pseudo_locale import to_pseudo
from tests.unit.fidelity_fakes import AligningPseudoTranslator, PseudoTranslator

EN_XA = Pair.parse("en_en-XA")
HTML = '<p>Hello <b>big <i>world</i></b>! <a href="/home" title="Go home">Click</a> &amp; go.</p>'
HTML_XA = (
    '<p>Ĥéļļö <b>ƀîĝ <i>ŵöŕļð</i></b>! <a href="/home" title="Ĝö ĥöɱé">Çļîçķ</a> &amp; ĝö.</p>'
)


def run(text, fmt="text", translator=None, glossary=None):
    engine = TranslatorEngine(translator or AligningPseudoTranslator(), EN_XA)
    return asyncio.run(translate_text(text, fmt, engine, glossary=glossary))


def test_tokens_kept_by_the_model_give_an_exact_result():
    result = run(HTML, "html")
    assert isinstance(result, Restored)
    assert (result.text, result.fidelity) == (HTML_XA, "exact")


def test_dropped_tokens_are_put_back_by_attention():
    translator = AligningPseudoTranslator(drop=True)
    result = run(HTML, "html", translator)
    assert isinstance(result, Restored)
    assert (result.text, result.fidelity) == (HTML_XA, "aligned")


def test_without_attention_dropped_tokens_fall_back_to_node_by_node():
    translator = PseudoTranslator(drop=True)
    result = run(HTML, "html", translator)
    assert isinstance(result, Restored)
    assert (result.text, result.fidelity) == (HTML_XA, "fallback")
    # the fallback translated the text between the tags one by one
    assert ["Hello ", "big ", "world", "Click", " go."] in translator.calls


def test_characters_the_model_knows_only_as_bytes_are_copied_through():
    translator = PseudoTranslator(corrupt="東")
    result = run("Visit 東京 today", "text", translator)
    assert isinstance(result, Restored)
    assert result.text == "Ṽîšîţ 東京 ţöðáý"
    assert "\ufffd" not in result.text


def test_corruption_that_survives_every_retry_is_bad_output():
    class Hopeless(PseudoTranslator):
        def unknown_characters(self, text, pair):
            return frozenset()

    result = run("Visit Kyoto", "text", Hopeless(corrupt="ý"))
    assert isinstance(result, Failed) and result.reason == "bad_output"


def test_placeholders_in_every_form_survive_exactly():
    text = (
        "Hi {name}, %s has %1$d items ({{count}}), see <0>this</0>, %(user)s, $t(more), "
        "https://example.com/a?b=1 or mail bob@example.org and run `make test`."
    )
    result = run(text)
    expected = (
        "Ĥî {name}, %s ĥáš %1$d îţéɱš ({{count}}), šéé <0>ţĥîš</0>, %(user)s, $t(more), "
        "https://example.com/a?b=1 öŕ ɱáîļ bob@example.org áñð ŕûñ `make test`."
    )
    assert isinstance(result, Restored) and result.text == expected


def test_icu_plural_translates_messages_and_keeps_syntax():
    text = "{count, plural, one {# file} other {# files}} in {folder}"
    result = run(text)
    assert isinstance(result, Restored)
    assert result.text == "{count, plural, one {# ƒîļé} other {# ƒîļéš}} îñ {folder}"


def test_glossary_and_do_not_translate_terms():
    glossary = Glossary(
        [Term("Kafka"), Term("train station", "Ɓahnhof"), Term("train", "Żug")], name="g", version=3
    )
    result = run("Kafka at the Train station, not Kafkaesque trains. A train!", glossary=glossary)
    assert isinstance(result, Restored)
    assert result.text == "Kafka áţ ţĥé Ɓahnhof, ñöţ Ķáƒķáéšǫûé ţŕáîñš. Å Żug!"
    assert {(h.source, h.target, h.count) for h in result.glossary_hits} == {
        ("Kafka", None, 1),
        ("train station", "Ɓahnhof", 1),
        ("train", "Żug", 1),
    }


def test_glossary_matching_rules():
    glossary = Glossary([Term("API"), Term("e-mail", "courriel"), Term("cafe\u0301", "Café")])
    found = [(m.replacement, m.hit.source) for m in glossary.find("An API, an api, E-mail, café.")]
    # case-sensitive when written with capitals; lower-case terms match any case; NFC
    assert found == [("API", "API"), ("Courriel", "e-mail"), ("Café", "café")]
    with pytest.raises(ValueError):
        Glossary([Term("  ")])


def test_markdown_and_xml_through_the_ladder():
    md = "# Title *here*\n\n- Read [the docs](http://d.io) and `run` it\n"
    result = run(md, "markdown", AligningPseudoTranslator(drop=True))
    assert isinstance(result, Restored)
    assert result.text == "# Ţîţļé *ĥéŕé*\n\n- Ŕéáð [ţĥé ðöçš](http://d.io) áñð `run` îţ\n"
    xml = '<doc><p>Some <em>bold</em> words</p><p translate="no">keep</p></doc>'
    result = run(xml, "xml")
    assert isinstance(result, Restored)
    assert result.text == '<doc><p>Šöɱé <em>ƀöļð</em> ŵöŕðš</p><p translate="no">keep</p></doc>'


def test_check_run_and_corruption():
    run_ = Run(
        ("a ", Span(literal_doc("<b>"), "open", 1), "b", Span(literal_doc("</b>"), "close", 1))
    )
    assert check_run(run_, "x ⟦0⟧y⟦1⟧") is None
    assert check_run(run_, "x ⟦1⟧y⟦0⟧") == "tokens"  # closes before it opens
    assert check_run(run_, "x ⟦0⟧y") == "tokens"
    assert check_run(run_, "x ⟦0⟧⟦0⟧y⟦1⟧") == "tokens"
    assert check_run(run_, "x ⟦0⟧y⟦1⟧\n") == "lines"
    assert check_run(run_, "x ⟦0⟧\ufffd⟦1⟧") == "corrupt"
    assert not corrupted("a \ufffd", "b \ufffd")
    assert corrupted("a", "b\ud800")


def test_reinsert_uses_word_attention():
    run_ = Run(
        (
            "Hello ",
            Span(literal_doc("<b>"), "open", 1),
            "big world",
            Span(literal_doc("</b>"), "close", 1),
            "!",
        )
    )
    stripped = strip_tokens(run_, run_.engine_text())
    assert stripped.text == "Hello big world!"
    # target words in another order: "world big Hello!" — attention follows the words
    target = "world big Hello!"
    src = [(i, i + 1) for i in range(len(stripped.text))]
    tgt = [(i, i + 1) for i in range(len(target))]
    where = {0: 10, 6: 6, 10: 0}  # first letters: Hello->10, big->6, world->0
    attention = np.zeros((len(tgt), len(src)), dtype=np.float32)
    for s_word_start, t_word_start in where.items():
        for k in range(3):
            attention[t_word_start + k][s_word_start + k] = 1.0
    blocks = [AttentionBlock(0, 0, attention)]
    assert reinsert(stripped, target, src, tgt, blocks) == "world⟦1⟧ ⟦0⟧big Hello!"


def test_expected_outputs_use_the_map():
    assert to_pseudo("Click") == "Çļîçķ"


def test_a_call_the_engine_refuses_fails_only_its_request():
    from pipeline.fidelity.drive import drive
    from pipeline.fidelity.prepare import FidelityConfig, prepare
    from pipeline.fidelity.restore import Refused, Restoration

    class Picky:
        def can_align(self):
            return False

        def unknown_characters(self, text):
            return frozenset()

        async def translate(self, calls, pairs):
            return [
                Refused("boom")
                if "poison" in c.text
                else AligningPseudoTranslator().translate_batch([c.text], EN_XA)[0]
                for c in calls
            ]

    engine = Picky()
    good = Restoration(prepare("fine text", "text", FidelityConfig()), engine)
    bad = Restoration(prepare("<p>a <b>poison</b> pill</p>", "html", FidelityConfig()), engine)
    asyncio.run(drive([good, bad], engine, [EN_XA, EN_XA]))
    assert isinstance(good.outcome(), Restored) and good.outcome().text == "ƒîñé ţéẋţ"
    outcome = bad.outcome()
    assert isinstance(outcome, Failed) and (outcome.reason, outcome.message) == (
        "engine_rejected",
        "boom",
    )
