"""``babelstream bench engine``: the engine's own limit, before any queueing.

Times raw ``ctranslate2.Translator.translate_batch`` calls on pre-tokenized
generated sentences (3-40 words) for each batch size and compute type, after
one warm-up batch, for at least ``--seconds`` per configuration.
``tokens_per_s`` counts generated target tokens; ``input_tokens_per_s``
counts source tokens.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass

import click
import ctranslate2
import sentencepiece

from pipeline.demo_model.sentences import SentenceGenerator
from pipeline.engine.registry import PairEntry, Registry
from pipeline.engine.translator import resolve_device
from pipeline.progress import progress_bar
from pipeline.settings import Settings

BATCH_SIZES = (1, 8, 32, 64)
COMPUTE_TYPES = ("int8", "float32")


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """Throughput of one (batch size, compute type) configuration."""

    batch_size: int
    compute_type: str
    sentences_per_s: float
    tokens_per_s: float
    input_tokens_per_s: float
    sentences: int
    seconds: float
    inter_threads: int
    intra_threads: int


def measure(
    entry: PairEntry,
    sources: list[list[str]],
    *,
    batch_size: int,
    compute_type: str,
    device: str,
    inter_threads: int,
    intra_threads: int,
    min_seconds: float,
) -> EngineRecord:
    """Translate ``sources`` in batches of ``batch_size`` for at least ``min_seconds``."""
    model = ctranslate2.Translator(
        str(entry.model_dir),
        device=device,
        compute_type=compute_type,
        inter_threads=inter_threads,
        intra_threads=intra_threads,
    )
    prefix = [list(entry.target_prefix)] * batch_size if entry.target_prefix else None

    def run(batch: list[list[str]]) -> int:
        results = model.translate_batch(
            batch,
            target_prefix=prefix[: len(batch)] if prefix else None,
            beam_size=1,
            max_input_length=0,
            max_decoding_length=2 * max(len(s) for s in batch) + 16,
        )
        return sum(len(r.hypotheses[0]) - len(entry.target_prefix) for r in results)

    batches = [sources[i : i + batch_size] for i in range(0, len(sources), batch_size)]
    run(batches[0])  # warm-up
    n_sent = n_in = n_out = 0
    start = time.perf_counter()
    k = 1
    while True:
        batch = batches[k % len(batches)]
        n_out += run(batch)
        n_sent += len(batch)
        n_in += sum(len(s) for s in batch)
        k += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and k > 2:
            break
    return EngineRecord(
        batch_size=batch_size,
        compute_type=compute_type,
        sentences_per_s=round(n_sent / elapsed, 2),
        tokens_per_s=round(n_out / elapsed, 1),
        input_tokens_per_s=round(n_in / elapsed, 1),
        sentences=n_sent,
        seconds=round(elapsed, 3),
        inter_threads=inter_threads,
        intra_threads=intra_threads,
    )


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--pair", "pair_id", default="en_en-XA", show_default=True,
              help="Registry pair whose model is measured.")
@click.option("--seconds", default=3.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Minimum time per configuration.")
@click.option("--sentences", default=256, show_default=True, type=click.IntRange(64),
              help="Generated sentences (3-40 words) cycled through.")
@click.pass_obj
def engine(settings: Settings, as_json: bool, pair_id: str, seconds: float, sentences: int) -> None:
    """Sentences/s and tokens/s of raw translate_batch for batch sizes 1-64, int8 and float32."""
    (entry,) = Registry.load(settings.engine.registry).entries([pair_id])
    device = resolve_device(settings.engine.device)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(entry.source_tokenizer))
    gen = SentenceGenerator(7, heldout=True, min_words=3, max_words=40)
    sources = [
        [*entry.source_prefix, *sp.encode(gen.sentence(), out_type=str), *entry.source_suffix]
        for _ in range(sentences)
    ]
    inter = settings.engine.inter_threads
    intra = settings.engine.intra_threads or os.cpu_count() or 1
    configurations = [(ct, bs) for ct in COMPUTE_TYPES for bs in BATCH_SIZES]
    records = []
    with progress_bar("configurations", total=len(configurations)) as bar:
        for ct, bs in configurations:
            bar.set_postfix_str(f"{ct} batch {bs}")
            records.append(measure(
                entry,
                sources,
                batch_size=bs,
                compute_type=ct,
                device=device,
                inter_threads=inter,
                intra_threads=intra,
                min_seconds=seconds,
            ))
            bar.update()
    doc = {
        "bench": "engine",
        "model_id": entry.model_id,
        "pair": entry.pair.id,
        "device": device,
        "cpu_count": os.cpu_count(),
        "inter_threads": inter,
        "intra_threads": intra,
        "beam_size": 1,
        "results": [asdict(r) for r in records],
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{entry.model_id} {entry.pair.id} on {device}, threads {inter}x{intra}")
    for r in records:
        click.echo(
            f"  {r.compute_type:<8} batch {r.batch_size:>3}: {r.sentences_per_s:>8.1f} sent/s "
            f"{r.tokens_per_s:>10.1f} tok/s"
        )
