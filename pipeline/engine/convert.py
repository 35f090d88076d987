"""Convert real models to CTranslate2 with CTranslate2's own converters.

``babelstream models convert --from transformers|opennmt-py|marian SOURCE``
wraps ``TransformersConverter`` (Hugging Face checkpoints: OPUS-MT
``Helsinki-NLP/opus-mt-*``, NLLB-200, M2M-100, ...), ``OpenNMTPyConverter``
(an OpenNMT-py ``.pt`` checkpoint) and ``MarianConverter`` (a Marian ``.npz``
model with its ``*.vocab.yml``, as in the OPUS-MT release zips), copies the
SentencePiece model(s) next to the converted model, and can append a
registry entry for the pair it serves.

The transformers and OpenNMT-py converters need PyTorch (the ``train`` extra,
in ``.venv-train``); ``babelstream models convert`` runs them there.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from pipeline.errors import ConfigError
from pipeline.settings import PROJECT_ROOT, Quantization

SOURCES = ("transformers", "opennmt-py", "marian")
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
# SentencePiece files that model families ship, in order of preference
_TOKENIZER_FILES = ("source.spm", "target.spm", "sentencepiece.bpe.model", "spm.model")
NEEDS_TORCH = frozenset({"transformers", "opennmt-py"})
# the virtualenv with PyTorch and transformers (`make train-env`)
TRAIN_PYTHON = PROJECT_ROOT / ".venv-train" / "bin" / "python"
TRAIN_HINT = (
    "PyTorch and transformers live in a separate virtualenv: create it with `make train-env` "
    "(or `python -m venv .venv-train && .venv-train/bin/pip install -e '.[train]'`)"
)


@dataclass(frozen=True, slots=True)
class Tokenizers:
    """SentencePiece files found in a converted model directory (relative names)."""

    source: str
    target: str


def find_tokenizers(model_dir: Path) -> Tokenizers | None:
    """The SentencePiece model(s) in ``model_dir``, or None when there are none."""
    if (model_dir / "source.spm").is_file() and (model_dir / "target.spm").is_file():
        return Tokenizers("source.spm", "target.spm")
    for name in ("sentencepiece.bpe.model", "spm.model"):
        if (model_dir / name).is_file():
            return Tokenizers(name, name)
    spm = sorted(p.name for p in model_dir.glob("*.model"))
    return Tokenizers(spm[0], spm[0]) if len(spm) == 1 else None


def convert_model(
    kind: str, source: str, output: Path, quantization: str = "int8", *, force: bool = False
) -> Path:
    """Convert ``source`` of the given ``kind`` into ``output``; return ``output``."""
    if kind not in SOURCES:
        raise ConfigError(f"unknown source kind {kind!r}; choose one of {', '.join(SOURCES)}")
    if quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}"
        )
    if output.exists() and any(output.iterdir()) and not force:
        raise ConfigError(f"{output} exists and is not empty; pass --force to overwrite it")
    src = Path(source)
    if kind == "transformers":
        from ctranslate2.converters import TransformersConverter

        copy = [name for name in _TOKENIZER_FILES if (src / name).is_file()]
        converter = TransformersConverter(source, copy_files=copy or None)
    elif kind == "opennmt-py":
        from ctranslate2.converters import OpenNMTPyConverter

        if not src.is_file():
            raise ConfigError(f"{src} is not an OpenNMT-py checkpoint file (.pt)")
        converter = OpenNMTPyConverter(str(src))
    else:
        from ctranslate2.converters import MarianConverter

        model, vocabs = _marian_files(src)
        converter = MarianConverter(str(model), [str(v) for v in vocabs])
    converter.convert(str(output), quantization=quantization, force=True)
    if kind != "transformers":
        base = src if src.is_dir() else src.parent
        for name in _TOKENIZER_FILES:
            if (base / name).is_file() and not (output / name).exists():
                shutil.copyfile(base / name, output / name)
    return output


def _marian_files(src: Path) -> tuple[Path, list[Path]]:
    """The ``.npz`` model and ``*.vocab.yml`` vocabularies of an unpacked Marian model."""
    if not src.is_dir():
        raise ConfigError(f"{src}: for --from marian, give the directory of the unpacked model")
    models = sorted(src.glob("*.npz"))
    if len(models) > 1:
        best = [m for m in models if "best" in m.name]
        models = best[:1] if len(best) == 1 else models
    if len(models) != 1:
        raise ConfigError(f"{src}: expected one Marian .npz model, found {len(models)}")
    vocabs = sorted(src.glob("*.vocab.yml"))
    if not vocabs:
        raise ConfigError(f"{src}: no *.vocab.yml vocabulary next to the model")
    return models[0], vocabs


def run_in_train_env(module: str, args: list[str], python: Path | None = None) -> None:
    """Run ``python -m module args`` where PyTorch is: this interpreter when it has it,
    else ``python`` (the training virtualenv's by default); ConfigError naming the
    install when neither has it."""
    python = python or TRAIN_PYTHON
    if importlib.util.find_spec("torch") is not None:
        python = Path(sys.executable)
    elif not Path(python).is_file():
        raise ConfigError(f"{python} not found. {TRAIN_HINT}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    code = subprocess.call([str(python), "-m", module, *args], cwd=PROJECT_ROOT, env=env)
    if code != 0:
        raise ConfigError(f"{module} failed (exit {code})")


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.engine.convert``: the conversion step alone (run under .venv-train)."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.engine.convert")
    parser.add_argument("--from", dest="kind", choices=SOURCES, required=True)
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="int8")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("source")
    args = parser.parse_args(argv)
    try:
        convert_model(args.kind, args.source, args.output, args.quantization, force=args.force)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"error: conversion failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
