"""`models convert`: argument checks and tokenizer discovery (no real conversion here)."""

from __future__ import annotations

import pytest

from pipeline.engine.convert import Tokenizers, convert_model, find_tokenizers
from pipeline.errors import ConfigError


def test_rejects_unknown_kind_and_quantization(tmp_path):
    with pytest.raises(ConfigError, match="unknown source kind"):
        convert_model("fairseq", "x", tmp_path / "out")
    with pytest.raises(ConfigError, match="unknown quantization"):
        convert_model("marian", "x", tmp_path / "out", "int4")


def test_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.bin").write_bytes(b"")
    with pytest.raises(ConfigError, match="--force"):
        convert_model("marian", str(tmp_path), out)


def test_marian_needs_npz_and_vocab(tmp_path):
    src = tmp_path / "opus"
    src.mkdir()
    with pytest.raises(ConfigError, match=r"one Marian \.npz"):
        convert_model("marian", str(src), tmp_path / "out")
    (src / "opus.bpe32k.transformer.model1.npz.best-perplexity.npz").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"vocab\.yml"):
        convert_model("marian", str(src), tmp_path / "out")


def test_find_tokenizers(tmp_path):
    assert find_tokenizers(tmp_path) is None
    (tmp_path / "sentencepiece.bpe.model").write_bytes(b"")
    assert find_tokenizers(tmp_path) == Tokenizers(
        "sentencepiece.bpe.model", "sentencepiece.bpe.model"
    )
    (tmp_path / "source.spm").write_bytes(b"")
    (tmp_path / "target.spm").write_bytes(b"")
    assert find_tokenizers(tmp_path) == Tokenizers("source.spm", "target.spm")
