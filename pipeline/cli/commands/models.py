"""``babelstream models ...``: list, convert, build and evaluate translation models."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from pipeline.contract.pairs import Pair
from pipeline.engine.convert import (
    NEEDS_TORCH,
    QUANTIZATIONS,
    SOURCES,
    TRAIN_PYTHON,
    find_tokenizers,
    run_in_train_env,
)
from pipeline.engine.registry import PairEntry, Registry
from pipeline.errors import ContractError
from pipeline.settings import PROJECT_ROOT, Settings


@click.group()
def models() -> None:
    """Translation models: the registry, conversion of real models, the demo model."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--registry", type=click.Path(path_type=Path), help="Registry file (default: settings)."
)
@click.pass_obj
def list_models(settings: Settings, as_json: bool, registry: Path | None) -> None:
    """Pairs in the model registry, with their model and whether its files are present."""
    reg = _registry(settings, registry)
    rows = []
    for entry in reg.pairs.values():
        problems = entry.problems()
        rows.append({**entry.to_json(), "ok": not problems, "problems": problems})
    if as_json:
        click.echo(json.dumps({"registry": str(reg.path), "pairs": rows}, indent=2))
        return
    click.echo(f"registry: {reg.path}")
    line = "{:<14} {:<24} {:<8} {:<5} {:<32} {}".format
    click.echo(line("PAIR", "MODEL", "COMPUTE", "FILES", "SOURCE", "LICENCE"))
    for row in rows:
        files = "ok" if row["ok"] else "MISSING"
        click.echo(
            line(
                row["pair"],
                row["model_id"],
                row["compute_type"],
                files,
                row["source"] or "-",
                row["licence"] or "-",
            )
        )
        if not row["ok"]:
            click.echo(f"  {row['model_dir']}: " + "; ".join(row["problems"]))


@models.command()
@click.argument("source")
@click.option(
    "--pair",
    "pair_ids",
    multiple=True,
    help="SRC_TGT: the pair(s) to take from an Argos index or a folder of packages; for an "
    "OPUS-MT release or a Hugging Face name, the pair it translates when it does not say.",
)
@click.option("--sha256", help="The archive's SHA-256 (an index's published one is checked too).")
@click.option("--model-id", help="Name the model (its work topics) [default: from the source].")
@click.option("--force", is_flag=True, help="Replace a model or pair the registry has already.")
@click.option(
    "--registry",
    type=click.Path(path_type=Path),
    help="Registry file (default: settings); the models go beside it.",
)
@click.pass_obj
def add(
    settings: Settings,
    source: str,
    pair_ids: tuple[str, ...],
    sha256: str | None,
    model_id: str | None,
    force: bool,
    registry: Path | None,
) -> None:
    """Add a model from SOURCE to the registry, ready to serve.

    \b
    SOURCE is one of:
      an Argos package      translate-en_de-1_0.argosmodel (a file or URL)
      installed packages    ~/.local/share/argos-translate/packages (every package)
      the Argos index       argos --pair en_de (or an index URL ending in .json)
      an OPUS-MT release    opus-2020-02-26.zip (a file or URL; converted, int8)
      a Hugging Face name   Helsinki-NLP/opus-mt-en-de (needs `make train-env`)

    Downloads resume where they stopped and are checked against a SHA-256 when one
    is given or published. Each model is loaded and tried before it is registered:
    a source that fails any step registers nothing.
    """
    from pipeline.engine.imports.install import ModelImporter

    try:
        pairs = [Pair.parse(p) for p in pair_ids]
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None
    importer = ModelImporter(
        registry or settings.engine.registry,
        settings.models,
        force=force,
        say=lambda line: click.echo(line, err=True),
    )
    added = importer.add(source, pairs, sha256=sha256, model_id=model_id)
    if not added:
        raise click.ClickException(f"{source}: no translation model to add")
    for model in added:
        click.echo(
            json.dumps(
                {
                    "model_id": model.model_id,
                    "pairs": list(model.pairs),
                    "model_dir": str(model.model_dir),
                    "source": model.source,
                    "licence": model.licence,
                    "sample": model.sample,
                    "model_bytes": model.model_bytes,
                },
                ensure_ascii=False,
            )
        )


@models.command()
@click.argument("source")
@click.option("--from", "kind", type=click.Choice(SOURCES), required=True, help="Source format.")
@click.option(
    "--quantization",
    type=click.Choice(QUANTIZATIONS),
    default="int8",
    show_default=True,
    help="Weight type of the converted model.",
)
@click.option("--output", type=click.Path(path_type=Path), required=True, help="Output directory.")
@click.option("--pair", "pair_id", help="Also add a registry entry for this pair (SRC_TGT).")
@click.option("--target-prefix", multiple=True, help="Token(s) forced first in the output.")
@click.option("--source-prefix", multiple=True, help="Token(s) put before the source.")
@click.option(
    "--source-suffix",
    multiple=True,
    help="Token(s) put after the source [default: </s> for transformers; marian models "
    "get it from CTranslate2].",
)
@click.option("--compute-type", default="auto", show_default=True, help="Registry compute_type.")
@click.option(
    "--max-input-tokens",
    default=512,
    show_default=True,
    type=click.IntRange(2),
    help="Longest input the model takes; longer texts are split at sentences.",
)
@click.option("--force", is_flag=True, help="Overwrite a non-empty output directory.")
@click.option(
    "--registry", type=click.Path(path_type=Path), help="Registry file (default: settings)."
)
@click.pass_obj
def convert(
    settings: Settings,
    source: str,
    kind: str,
    quantization: str,
    output: Path,
    pair_id: str | None,
    target_prefix: tuple[str, ...],
    source_prefix: tuple[str, ...],
    source_suffix: tuple[str, ...],
    compute_type: str,
    max_input_tokens: int,
    force: bool,
    registry: Path | None,
) -> None:
    """Convert SOURCE to a CTranslate2 model with CTranslate2's own converters.

    SOURCE is a Hugging Face model directory or hub name (transformers), an
    OpenNMT-py .pt checkpoint (opennmt-py) or an unpacked Marian model
    directory with its .npz and *.vocab.yml files (marian). With --pair the
    model is added to the registry.
    """
    reg = _registry(settings, registry, create=True) if pair_id else None
    try:
        pair = Pair.parse(pair_id) if pair_id else None
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None
    if reg and pair and pair.id in reg.pairs:
        raise click.BadParameter(f"pair {pair.id} is already in {reg.path}", param_hint="--pair")
    if Path(source).exists():  # a local path; otherwise a hub name for transformers
        source = str(Path(source).resolve())
    output = output.resolve()
    args = ["--from", kind, "--quantization", quantization, "--output", str(output), source]
    if force:
        args.insert(0, "--force")
    if kind in NEEDS_TORCH and importlib.util.find_spec("torch") is None:
        run_in_train_env("pipeline.engine.convert", args)
    else:
        from pipeline.engine.convert import main as convert_main

        if convert_main(args) != 0:
            raise click.ClickException("conversion failed")
    click.echo(f"converted {source} -> {output} ({quantization})", err=True)
    if reg and pair:
        _register(
            reg,
            pair,
            output,
            kind,
            target_prefix,
            source_prefix,
            source_suffix,
            compute_type,
            max_input_tokens,
        )


def _register(
    reg: Registry,
    pair: Pair,
    output: Path,
    kind: str,
    target_prefix: tuple[str, ...],
    source_prefix: tuple[str, ...],
    source_suffix: tuple[str, ...],
    compute_type: str,
    max_input_tokens: int,
) -> None:
    model_dir = output.resolve()
    tokenizers = find_tokenizers(model_dir)
    if tokenizers is None:
        raise click.ClickException(
            f"no SentencePiece model found in {model_dir}; copy it there and add the "
            f"registry entry by hand"
        )
    # CTranslate2's Marian converter sets add_source_eos (it appends </s> itself)
    suffix = source_suffix or (("</s>",) if kind == "transformers" else ())
    entry = PairEntry(
        pair=pair,
        model_dir=model_dir,
        source_tokenizer=model_dir / tokenizers.source,
        target_tokenizer=model_dir / tokenizers.target,
        model_id=model_dir.name,
        target_prefix=target_prefix,
        source_prefix=source_prefix,
        source_suffix=suffix,
        compute_type=compute_type,
        max_input_tokens=max_input_tokens,
    )
    reg.add(entry)
    click.echo(f"added {pair.id} -> {model_dir} to {reg.path}", err=True)


@models.command("build-demo", context_settings={"ignore_unknown_options": True})
@click.option(
    "--train-python",
    type=click.Path(path_type=Path),
    default=TRAIN_PYTHON,
    show_default=True,
    help="Python of the training virtualenv (PyTorch, transformers).",
)
@click.argument("build_args", nargs=-1, type=click.UNPROCESSED)
def build_demo(train_python: Path, build_args: tuple[str, ...]) -> None:
    """Train the bundled demo model, convert it to CTranslate2 INT8 and evaluate it.

    Runs `python -m pipeline.demo_model.build` under the training virtualenv.
    Extra options go to it: --steps N, --threads N, --work-dir DIR,
    --output DIR, --stages tokenizer,train,convert,eval, --fresh.
    """
    run_in_train_env("pipeline.demo_model.build", list(build_args), train_python)


@models.command("build-bench")
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model directory [default: <bench registry dir>/opus-shaped].",
)
@click.option(
    "--pair",
    "pair_id",
    default="en_en-XB",
    show_default=True,
    help="Pseudo pair the model is registered as.",
)
@click.option(
    "--quantization",
    type=click.Choice(QUANTIZATIONS),
    default="int8",
    show_default=True,
    help="Weight type of the converted model.",
)
@click.option(
    "--vocab-size",
    default=32000,
    show_default=True,
    type=click.IntRange(1000),
    help="SentencePiece pieces (fewer when the generated corpus has too few).",
)
@click.option("--seed", default=13, show_default=True, help="Seed of sentences and weights.")
@click.option(
    "--languages",
    type=click.IntRange(2, 600),
    default=None,
    help="Build an NLLB-shaped multilingual model instead: English and N-1 synthetic "
    "languages, a token each, every ordered pair served (200: 39,800 pairs); registered "
    "as one [[model]] table in multilingual.toml beside the benchmark registry.",
)
@click.pass_obj
def build_bench(
    settings: Settings,
    output: Path | None,
    pair_id: str,
    quantization: str,
    vocab_size: int,
    seed: int,
    languages: int | None,
) -> None:
    """Build an OPUS-MT-shaped model with random weights for benchmarks (no PyTorch).

    d_model 512, 6+6 layers, 8 heads, FFN 2048 and a ~32k SentencePiece
    vocabulary trained on generated sentences, written as a Marian .npz and
    converted by CTranslate2's Marian converter; registered in the benchmark
    registry (engine.bench_registry, under var/, not committed). Prints JSON.
    """
    from pipeline.bench.model import (
        BenchModelShape,
        build_bench_model,
        build_multilingual_bench_model,
    )

    if languages is not None:
        registry = multilingual_registry(settings)
        built = build_multilingual_bench_model(
            output or registry.parent / "nllb-shaped",
            registry,
            languages=languages,
            shape=BenchModelShape(vocab_size=vocab_size),
            quantization=quantization,
            seed=seed,
        )
        _announce_bench_model(built.to_json(), built.pair, registry)
        return
    try:
        pair = Pair.parse(pair_id)
    except ContractError as exc:
        raise click.BadParameter(str(exc), param_hint="--pair") from None
    registry = settings.engine.bench_registry
    built = build_bench_model(
        output or registry.parent / "opus-shaped",
        registry,
        pair=pair,
        shape=BenchModelShape(vocab_size=vocab_size),
        quantization=quantization,
        seed=seed,
    )
    _announce_bench_model(built.to_json(), pair.id, registry)


def multilingual_registry(settings: Settings) -> Path:
    """Where ``build-bench --languages`` registers its model (beside the bench registry)."""
    return settings.engine.bench_registry.with_name("multilingual.toml")


@models.command("eval-demo")
@click.option(
    "--model-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=PROJECT_ROOT / "models" / "demo",
    show_default=True,
    help="The CTranslate2 model to evaluate.",
)
@click.option(
    "--threads",
    default=2,
    show_default=True,
    type=click.IntRange(1),
    help="CTranslate2 intra threads.",
)
@click.option(
    "--compute-type",
    default="int8",
    show_default=True,
    help="CTranslate2 compute type (int8, float32, ...).",
)
@click.option("--write", is_flag=True, help="Also write metrics.json next to the model.")
def eval_demo(model_dir: Path, threads: int, compute_type: str, write: bool) -> None:
    """chrF of the demo model on 500 held-out sentences, both pairs, beams 1 and 4 (JSON)."""
    from pipeline.demo_model.evaluate import evaluate_demo, write_metrics

    metrics = evaluate_demo(model_dir, threads=threads, compute_type=compute_type)
    click.echo(metrics.to_json())
    if write:
        write_metrics(metrics, model_dir)
    if not metrics.passed:
        raise click.ClickException("the demo model is below the chrF bar")


def _registry(settings: Settings, path: Path | None, *, create: bool = False) -> Registry:
    target = path or settings.engine.registry
    if create and not target.exists():
        return Registry(path=target)
    return Registry.load(target)


def _announce_bench_model(report: str, pair_id: str, registry: Path) -> None:
    """The built model's report on stdout, and how to serve it on stderr."""
    click.echo(report)
    click.echo(
        f"registered {pair_id} in {registry}; serve it with "
        f"BABELSTREAM_ENGINE__REGISTRY={registry}",
        err=True,
    )
