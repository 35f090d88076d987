"""The benchmark model: a Marian .npz written with NumPy, converted by CTranslate2, registered."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.bench.model import BenchModelShape, build_bench_model, marian_weights
from pipeline.contract.pairs import Pair
from pipeline.engine.registry import Registry
from pipeline.engine.translator import CTranslate2Translator
from pipeline.errors import ConfigError

TINY = BenchModelShape(
    d_model=32, encoder_layers=1, decoder_layers=2, heads=4, ffn=64, vocab_size=1000
)


def test_weights_have_the_shapes_marian_writes():
    weights = marian_weights(TINY, vocab=1001, seed=1)
    assert weights["Wemb"].shape == (1001, 32)
    assert weights["encoder_l1_self_Wq"].shape == (32, 32)
    assert weights["encoder_l1_ffn_W1"].shape == (32, 64)
    assert weights["decoder_l2_context_Wo_ln_scale"].shape == (1, 32)
    assert weights["decoder_ff_logit_out_b"].shape == (1, 1001)
    assert "decoder_l3_self_Wq" not in weights
    assert all(w.dtype == np.float32 for w in weights.values())


def test_build_convert_register_and_translate(tmp_path):
    registry = tmp_path / "bench" / "registry.toml"
    built = build_bench_model(
        tmp_path / "bench" / "tiny", registry, shape=TINY, sentences=2000, pair=Pair("en", "en-XB")
    )
    assert (built.model_dir / "model.bin").is_file() and (built.model_dir / "spm.model").is_file()
    assert not (tmp_path / "bench" / "tiny.marian").exists()  # float32 weights removed
    assert built.parameters > 0 and built.vocab_size <= TINY.vocab_size + 1
    (entry,) = Registry.load(registry).entries(["en_en-XB"])
    assert entry.decoding == "input_length" and entry.source_suffix == ()

    translator = CTranslate2Translator([entry], device="cpu", compute_type="int8")
    pair = entry.pair
    texts = ["Hello world, 42 times!", "A much longer sentence with quite a few more words."]
    prepared = translator.prepare(texts, [pair] * len(texts))
    out = translator.translate_prepared(prepared)
    # random weights: nonsense, but each exactly as long as its own source,
    # as a real model's output ends at its own </s>
    lengths = [p.tokens for p in prepared]
    assert lengths[0] < lengths[1]
    assert [t.output_tokens for t in out] == lengths
    assert [t.input_tokens for t in out] == lengths
    # beam search takes no step callback: every sequence is as long as the longest
    beams = CTranslate2Translator([entry], device="cpu", compute_type="int8", beam_size=2)
    assert [t.output_tokens for t in beams.translate_prepared(prepared)] == [
        lengths[1],
        lengths[1],
    ]

    # building again replaces the entry rather than adding a second one
    build_bench_model(tmp_path / "bench" / "tiny", registry, shape=TINY, sentences=2000)
    assert list(Registry.load(registry).pairs) == ["en_en-XB"]


def test_unknown_decoding_is_a_config_error(tmp_path):
    (tmp_path / "registry.toml").write_text(
        '[[pair]]\nid = "en_de"\nmodel = "m"\ntokenizer = "spm.model"\ndecoding = "forever"\n'
    )
    with pytest.raises(ConfigError, match="decoding"):
        Registry.load(tmp_path / "registry.toml")
