"""An OPUS-MT-shaped benchmark model with random weights, built in seconds.

``babelstream models build-bench`` writes a Marian model the way Marian
itself stores one — a NumPy ``.npz`` of named arrays with the YAML config
under ``special:model.yml``, plus a vocabulary YAML — and converts it with
CTranslate2's own ``MarianConverter`` (no PyTorch). The shape is OPUS-MT's
(``transformer-base``: d_model 512, 6 encoder + 6 decoder layers, 8 heads,
FFN 2048, post-norm, swish, tied embeddings) and the SentencePiece
vocabulary (~32k BPE pieces) is trained on the project's generated
sentences, so texts cost as many tokens and as much compute per token as
with a real model of that size. The translations are nonsense: the point is
realistic engine cost, not quality.

Random weights never decide to stop, so the registry entry says
``decoding = "input_length"``: every sequence of an engine call decodes
exactly as many tokens as its own source, and leaves the call's batch then,
as a real model's sequence does at its ``</s>`` (see
:mod:`pipeline.engine.translator`).
"""

from __future__ import annotations

import io
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import sentencepiece
import yaml

from pipeline.contract.pairs import Pair
from pipeline.engine.registry import PairEntry, Registry, models_of
from pipeline.sample_sentences import SentenceGenerator

BENCH_PAIR = Pair("en", "en-XB")
REGISTRY_HEADER = (
    "# Benchmark models (`babelstream models build-bench`), not committed.\n"
    "# Serve them with BABELSTREAM_ENGINE__REGISTRY pointing at this file.\n"
)


@dataclass(frozen=True, slots=True)
class BenchModelShape:
    """Transformer hyper-parameters (OPUS-MT's ``transformer-base`` by default)."""

    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    heads: int = 8
    ffn: int = 2048
    vocab_size: int = 32000


@dataclass(frozen=True, slots=True)
class BuiltModel:
    """What ``build_bench_model`` produced, and how long each stage took."""

    model_dir: Path
    registry: Path
    pair: str
    vocab_size: int
    parameters: int
    model_bytes: int
    quantization: str
    seconds: dict[str, float]
    shape: BenchModelShape

    def to_json(self) -> str:
        data = asdict(self)
        data["model_dir"], data["registry"] = str(self.model_dir), str(self.registry)
        return json.dumps(data, indent=2)


def synthetic_languages(count: int, skip: tuple[str, ...] = ("en",)) -> list[str]:
    """``count`` two-letter language tags (``aa``, ``ab``, ...; ``skip`` left out): valid
    BCP-47 syntax, standing for as many languages of a multilingual benchmark model."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    tags = (a + b for a in letters for b in letters)
    chosen = [t for t in tags if t not in skip][:count]
    if len(chosen) < count:
        raise ValueError(f"at most {26 * 26 - len(skip)} synthetic languages")
    return chosen


def language_token(tag: str) -> str:
    """The multilingual benchmark model's token for a language (M2M-100's form)."""
    return f"__{tag}__"


def train_tokenizer(
    vocab_size: int, sentences: int, seed: int, symbols: tuple[str, ...] = ()
) -> bytes:
    """A BPE SentencePiece model trained on generated sentences (Marian's special ids);
    ``symbols`` are pieces of their own (language tokens)."""
    generator = SentenceGenerator(seed, min_words=3, max_words=40)
    lines = [generator.sentence() for _ in range(sentences)]
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        model_type="bpe",
        vocab_size=vocab_size,
        hard_vocab_limit=False,  # fewer pieces rather than a failure on a small corpus
        character_coverage=1.0,
        byte_fallback=True,
        # Marian's convention: </s> = 0, <unk> = 1, no <s>
        bos_id=-1,
        eos_id=0,
        unk_id=1,
        pad_id=-1,
        user_defined_symbols=list(symbols),
        minloglevel=2,
    )
    return out.getvalue()


def vocabulary(sp: sentencepiece.SentencePieceProcessor) -> list[str]:
    """Marian's vocabulary: the SentencePiece pieces in id order, then ``<pad>``."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())] + ["<pad>"]


def vocab_yaml(tokens: list[str]) -> str:
    """A Marian ``*.vocab.yml`` (``token: id`` lines; tokens JSON-quoted, valid YAML)."""
    return "".join(f"{json.dumps(t, ensure_ascii=False)}: {i}\n" for i, t in enumerate(tokens))


def marian_config(shape: BenchModelShape) -> dict[str, object]:
    """The ``special:model.yml`` keys CTranslate2's Marian converter reads."""
    return {
        "type": "transformer",
        "dim-emb": shape.d_model,
        "enc-depth": shape.encoder_layers,
        "dec-depth": shape.decoder_layers,
        "transformer-heads": shape.heads,
        "transformer-dim-ffn": shape.ffn,
        "transformer-ffn-activation": "swish",
        "transformer-preprocess": "",
        "transformer-postprocess": "dan",
        "transformer-postprocess-emb": "d",
        "transformer-decoder-autoreg": "self-attention",
        "transformer-no-projection": False,
        "transformer-guided-alignment-layer": "last",
        "tied-embeddings-all": True,
    }


def marian_weights(shape: BenchModelShape, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Random weights under the parameter names Marian writes (post-norm Transformer)."""
    rng = np.random.default_rng(seed)
    d, f = shape.d_model, shape.ffn

    def matrix(rows: int, cols: int) -> np.ndarray:
        # Glorot-scaled, so activations stay in a realistic range through 12 layers
        return rng.normal(0.0, np.sqrt(2.0 / (rows + cols)), (rows, cols)).astype(np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros((1, n), np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}_ln_scale": np.ones((1, d), np.float32), f"{prefix}_ln_bias": zeros(d)}

    def attention(prefix: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for p in "qkvo":
            out[f"{prefix}_W{p}"], out[f"{prefix}_b{p}"] = matrix(d, d), zeros(d)
        return out | norm(f"{prefix}_Wo")

    def ffn(prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}_W1": matrix(d, f),
            f"{prefix}_b1": zeros(f),
            f"{prefix}_W2": matrix(f, d),
            f"{prefix}_b2": zeros(d),
        } | norm(f"{prefix}_ffn")

    weights: dict[str, np.ndarray] = {"Wemb": matrix(vocab, d)}
    for i in range(1, shape.encoder_layers + 1):
        weights |= attention(f"encoder_l{i}_self") | ffn(f"encoder_l{i}_ffn")
    for i in range(1, shape.decoder_layers + 1):
        weights |= (
            attention(f"decoder_l{i}_self")
            | attention(f"decoder_l{i}_context")
            | ffn(f"decoder_l{i}_ffn")
        )
    weights["decoder_ff_logit_out_b"] = zeros(vocab)
    return weights


def write_marian(directory: Path, shape: BenchModelShape, sp_model: bytes, seed: int) -> int:
    """Write ``model.npz``, ``vocab.yml`` and ``spm.model``; return the parameter count."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spm.model").write_bytes(sp_model)
    tokens = vocabulary(sentencepiece.SentencePieceProcessor(model_proto=sp_model))
    (directory / "vocab.yml").write_text(vocab_yaml(tokens), encoding="utf-8")
    weights = marian_weights(shape, len(tokens), seed)
    config = yaml.safe_dump(marian_config(shape)).encode() + b"\0"  # Marian NUL-terminates it
    weights["special:model.yml"] = np.frombuffer(config, dtype=np.int8)
    np.savez(directory / "model.npz", **weights)  # type: ignore[arg-type]
    return sum(w.size for name, w in weights.items() if not name.startswith("special:"))


def _build(
    output: Path,
    shape: BenchModelShape,
    quantization: str,
    sentences: int,
    seed: int,
    symbols: tuple[str, ...] = (),
) -> tuple[bytes, int, dict[str, float]]:
    """Tokenizer, random Marian weights, CTranslate2 conversion into ``output``;
    (the SentencePiece model, the parameter count, seconds per stage)."""
    from ctranslate2.converters import MarianConverter

    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    sp_model = train_tokenizer(shape.vocab_size, sentences, seed, symbols)
    seconds["tokenizer"] = time.perf_counter() - clock
    marian = output.parent / f"{output.name}.marian"
    clock = time.perf_counter()
    parameters = write_marian(marian, shape, sp_model, seed)
    seconds["weights"] = time.perf_counter() - clock
    clock = time.perf_counter()
    converter = MarianConverter(str(marian / "model.npz"), [str(marian / "vocab.yml")])
    converter.convert(str(output), quantization=quantization, force=True)
    shutil.copyfile(marian / "spm.model", output / "spm.model")
    shutil.rmtree(marian)  # ~300 MB of float32 weights; the converted model is what runs
    seconds["convert"] = time.perf_counter() - clock
    return sp_model, parameters, {k: round(v, 2) for k, v in seconds.items()}


def build_bench_model(
    output: Path,
    registry_path: Path,
    *,
    pair: Pair = BENCH_PAIR,
    shape: BenchModelShape | None = None,
    quantization: str = "int8",
    sentences: int = 15_000,
    seed: int = 13,
) -> BuiltModel:
    """Build, convert and register the benchmark model; replaces an earlier build."""
    shape = shape or BenchModelShape()
    sp_model, parameters, seconds = _build(output, shape, quantization, sentences, seed)
    entry = PairEntry(
        pair=pair,
        model_dir=output.resolve(),
        source_tokenizer=output.resolve() / "spm.model",
        target_tokenizer=output.resolve() / "spm.model",
        model_id=f"bench-{output.name}",
        # no source_suffix: the Marian converter sets add_source_eos, CTranslate2 adds </s>
        compute_type="auto",
        max_input_tokens=512,
        max_output_tokens=512,
        decoding="input_length",
        description="OPUS-MT-shaped model with random weights (benchmarks only)",
    )
    earlier = Registry.load(registry_path).models.values() if registry_path.exists() else ()
    kept = [e for m in earlier for e in m.explicit.values() if e.pair != pair]
    models = models_of([*kept, entry])
    Registry(registry_path, {m.model_id: m for m in models}).save(REGISTRY_HEADER)
    return BuiltModel(
        model_dir=output.resolve(),
        registry=registry_path.resolve(),
        pair=pair.id,
        vocab_size=len(vocabulary(sentencepiece.SentencePieceProcessor(model_proto=sp_model))),
        parameters=parameters,
        model_bytes=(output / "model.bin").stat().st_size,
        quantization=quantization,
        seconds=seconds,
        shape=shape,
    )


def build_multilingual_bench_model(
    output: Path,
    registry_path: Path,
    *,
    languages: int,
    shape: BenchModelShape | None = None,
    quantization: str = "int8",
    sentences: int = 15_000,
    seed: int = 13,
) -> BuiltModel:
    """An NLLB-shaped benchmark model: one vocabulary with a token per language, the
    source and target language tokens around each sequence, every ordered pair of
    ``languages`` synthetic languages plus English served by one [[model]] table in
    ``registry_path`` (rewritten)."""
    import tomli_w

    shape = shape or BenchModelShape()
    tags = ["en", *synthetic_languages(languages - 1)]
    tokens = tuple(language_token(t) for t in tags)
    sp_model, parameters, seconds = _build(output, shape, quantization, sentences, seed, tokens)
    model_id = f"bench-{output.name}"
    table = {
        "model_id": model_id,
        "model": str(output.resolve()),
        "tokenizer": "spm.model",
        "languages": tags,
        "language_token": language_token("{lang}"),
        "source_prefix": ["{src}"],
        "target_prefix": ["{tgt}"],
        "suppress_language_tokens": True,
        "compute_type": "auto",
        "max_input_tokens": 512,
        "max_output_tokens": 512,
        "decoding": "input_length",
        "description": "NLLB-shaped multilingual model with random weights (benchmarks only)",
    }
    registry_path.parent.mkdir(parents=True, exist_ok=True)
    registry_path.write_text(REGISTRY_HEADER + "\n" + tomli_w.dumps({"model": [table]}))
    Registry.load(registry_path)  # what was written reads back
    return BuiltModel(
        model_dir=output.resolve(),
        registry=registry_path.resolve(),
        pair=f"{len(tags) * (len(tags) - 1)} pairs of {len(tags)} languages",
        vocab_size=len(vocabulary(sentencepiece.SentencePieceProcessor(model_proto=sp_model))),
        parameters=parameters,
        model_bytes=(output / "model.bin").stat().st_size,
        quantization=quantization,
        seconds=seconds,
        shape=shape,
    )
