"""CTranslate2Translator on the committed demo model: the model, not a rule, translates."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import ctranslate2
import pytest
import sentencepiece

from pipeline.contract.pairs import Pair
from pipeline.demo_model import DEMO_DIR, SPM_FILE
from pipeline.engine.registry import Registry
from pipeline.engine.translator import CTranslate2Translator, Translation, resolve_compute_type
from pipeline.errors import ConfigError, EngineError
from pipeline.settings import load_settings

EN_XA = Pair.parse("en_en-XA")
XA_EN = Pair.parse("en-XA_en")
HELLO = "Hello world, 42 times!"
HELLO_XA = "Ĥéļļö ŵöŕļð, 42 ţîɱéš!"


@pytest.fixture(scope="module")
def translator() -> CTranslate2Translator:
    return CTranslate2Translator.from_settings(load_settings().engine, ["en_en-XA", "en-XA_en"])


def test_plain_ctranslate2_acceptance():
    """The acceptance check from the issue, with nothing of ours in the path."""
    model = ctranslate2.Translator(str(DEMO_DIR), device="cpu")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(DEMO_DIR / SPM_FILE))

    def run(text: str, target: str) -> str:
        tokens = [*sp.encode(text, out_type=str), "</s>"]
        (result,) = model.translate_batch([tokens], target_prefix=[[target]])
        return sp.decode_pieces(result.hypotheses[0][1:])

    assert run(HELLO, ">>en-XA<<") == HELLO_XA
    assert run(HELLO_XA, ">>en<<") == HELLO


def test_acceptance_sentence_both_ways(translator):
    (fwd,) = translator.translate_batch([HELLO], EN_XA)
    assert fwd.text == HELLO_XA
    # characters + the word-start marker "▁" (+ "</s>" on the source side)
    assert fwd.input_tokens == translator.count_tokens(HELLO, EN_XA) == len(HELLO) + 2
    assert fwd.output_tokens == len(HELLO_XA) + 1
    (back,) = translator.translate_batch([HELLO_XA], XA_EN)
    assert back.text == HELLO


def test_pairs_share_one_model_and_its_calls(translator):
    assert translator.call_key(EN_XA) == translator.call_key(XA_EN)
    assert translator.model_id == "babelstream-demo-enxa"
    assert translator.loaded_models() == ["babelstream-demo-enxa"]
    # texts of both directions in one engine call, each with its own target prefix
    prepared = translator.prepare([HELLO, HELLO_XA], [EN_XA, XA_EN])
    call = translator.encode(prepared)
    assert len(call.sources) == 2 and call.prefixes == [[">>en-XA<<"], [">>en<<"]]
    fwd, back = translator.assemble(prepared, translator.run(call))
    assert (fwd.text, back.text) == (HELLO_XA, HELLO)


def test_empty_text_gives_empty_translation_without_the_model(translator, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the model must not be called for empty text")

    monkeypatch.setattr(translator, "run", boom)
    assert translator.translate_batch(["", "   "], EN_XA) == [
        Translation("", 0, 0),
        Translation("", 0, 0),
    ]
    assert translator.translate_batch([], EN_XA) == []
    assert translator.count_tokens("", EN_XA) == 0


def test_batch_keeps_order_and_mixes_empty(translator):
    texts = ["Good morning.", "", "The quick brown fox jumps over the lazy dog 7 times."]
    out = translator.translate_batch(texts, EN_XA)
    assert [t.text for t in out] == [
        "Ĝööð ɱöŕñîñĝ.",
        "",
        "Ţĥé ǫûîçķ ƀŕöŵñ ƒöẋ ĵûɱþš öṽéŕ ţĥé ļážý ðöĝ 7 ţîɱéš.",
    ]


def test_text_longer_than_the_model_limit_is_split_not_truncated(translator):
    sentence = "Zany Quentin fixed 12 jukeboxes near Wroclaw. "
    text = (sentence * 20).strip()
    limit = translator._pairs["en_en-XA"].entry.max_input_tokens
    assert translator.count_tokens(text, EN_XA) > limit
    (out,) = translator.translate_batch([text], EN_XA)
    expected = "Žáñý Ǫûéñţîñ ƒîẋéð 12 ĵûķéƀöẋéš ñéáŕ Ŵŕöçļáŵ."
    assert out.text.count(expected) >= 19  # every sentence translated, nothing dropped
    assert len(out.text) == len(text)
    assert out.input_tokens > limit


def test_line_breaks_are_kept(translator):
    (out,) = translator.translate_batch(["Hello world.\n\nBye now!\n"], EN_XA)
    assert out.text == "Ĥéļļö ŵöŕļð.\n\nƁýé ñöŵ!\n"


def test_non_latin_text_passes_through(translator):
    text = "Tokyo 東京 😀 ok"
    (out,) = translator.translate_batch([text], EN_XA)
    assert out.text.startswith("Ţöķýö")
    assert out.text.endswith("öķ")
    assert out.output_tokens > 0
    # nothing but CJK/emoji: no crash, a result of similar length
    (cjk,) = translator.translate_batch(["日本語のテキスト"], EN_XA)
    assert isinstance(cjk.text, str) and cjk.input_tokens > 0


def test_async_runs_off_the_loop(translator):
    async def go() -> list[Translation]:
        return await translator.translate_batch_async([HELLO], EN_XA)

    assert asyncio.run(go())[0].text == HELLO_XA


def test_unknown_pair_is_an_engine_error(translator):
    with pytest.raises(EngineError, match="not served"):
        translator.translate_batch(["x"], Pair("en", "de"))


def test_compute_type_resolution():
    assert resolve_compute_type("auto", "cpu") == "int8"
    assert resolve_compute_type("auto", "cuda") == "int8_float16"
    assert resolve_compute_type("float32", "cpu") == "float32"
    with pytest.raises(ConfigError):
        resolve_compute_type("int3", "cpu")


def test_explicit_compute_type_and_beam(tmp_path):
    entries = Registry.load(load_settings().engine.registry).entries(["en_en-XA"])
    t = CTranslate2Translator(entries, device="cpu", compute_type="float32", beam_size=4)
    assert t.compute_type(EN_XA) == "float32"
    assert t.translate_batch([HELLO], EN_XA)[0].text == HELLO_XA
    with pytest.raises(ConfigError, match="unknown device"):
        CTranslate2Translator(entries, device="tpu")


def test_a_memory_budget_loads_models_on_first_use_and_unloads_the_idle_one():
    """Two models (the demo weights under two model ids), room for one: each call of the
    other model loads it, unloading the one used least recently."""
    (entry,) = Registry.load(load_settings().engine.registry).entries(["en_en-XA"])
    a = dataclasses.replace(entry, model_id="demo-a")
    b = dataclasses.replace(entry, pair=XA_EN, model_id="demo-b", target_prefix=(">>en<<",))
    t = CTranslate2Translator([a, b], device="cpu", compute_type="int8", max_loaded_models=1)
    assert t.loaded_models() == [], "nothing loads before its first call"
    before = _samples("babelstream_model_evictions_total")
    assert t.translate_batch([HELLO], EN_XA)[0].text == HELLO_XA
    assert t.loaded_models() == ["demo-a"]
    assert t.translate_batch([HELLO_XA], XA_EN)[0].text == HELLO
    assert t.loaded_models() == ["demo-b"]
    assert t.translate_batch([HELLO], EN_XA)[0].text == HELLO_XA
    assert t.loaded_models() == ["demo-a"]
    assert _samples("babelstream_model_evictions_total") - before == 2


def _samples(name: str) -> float:
    from pipeline.observability import metrics

    return sum(
        s.value for family in metrics.REGISTRY.collect() for s in family.samples if s.name == name
    )


def test_a_text_counted_before_is_not_tokenised_again(translator, monkeypatch):
    """The fair-share agent counts tokens as it fetches; the engine call reuses them."""
    text = f"Counted once {uuid.uuid4().hex[:6]}"
    counted = translator.count_tokens(text, EN_XA)
    loaded = translator._loaded(EN_XA)
    calls: list[str] = []
    encode = loaded.source_sp.encode

    def spy(piece, **kwargs):
        calls.append(piece)
        return encode(piece, **kwargs)

    monkeypatch.setattr(loaded.source_sp, "encode", spy)
    (prepared,) = translator.prepare([text], [EN_XA])
    assert prepared.tokens == counted and calls == []
    (other,) = translator.prepare([text], [XA_EN])  # another pair's tokens are its own
    assert other.pair == XA_EN and calls
