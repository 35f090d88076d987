"""The engine's own limits, before any queueing: fixed batch sizes and the planned ceiling.

* :func:`measure_fixed` — unsorted batches of ``batch_size`` generated
  sentences straight into the model, for at least ``min_seconds``: what
  batching is worth on this model and machine.
* :func:`measure_ceiling` — a workload's texts tokenised once, planned by the
  worker's own cost-based batcher (length-sorted, same token budget) and run
  call by call: the most any pipeline around this engine can do with them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from pipeline.bench.report import EngineFigures
from pipeline.demo_model.sentences import SentenceGenerator
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import CTranslate2Translator, PreparedText
from pipeline.pairs import Pair


def generated_sentences(n: int, seed: int = 7) -> list[str]:
    """``n`` held-out generated sentences of 3-40 words."""
    generator = SentenceGenerator(seed, heldout=True, min_words=3, max_words=40)
    return [generator.sentence() for _ in range(n)]


def measure_fixed(
    translator: CTranslate2Translator,
    pair: Pair,
    prepared: Sequence[PreparedText],
    *,
    batch_size: int,
    min_seconds: float,
) -> EngineFigures:
    """Batches of ``batch_size`` prepared texts in their given order, after one warm-up."""
    batches = [prepared[i : i + batch_size] for i in range(0, len(prepared), batch_size)]
    translator.translate_prepared(batches[0], pair)  # warm-up
    n_sent = n_in = n_out = calls = 0
    padded = 0
    start = time.perf_counter()
    while True:
        batch = batches[(calls + 1) % len(batches)]
        results = translator.translate_prepared(batch, pair)
        calls += 1
        n_sent += len(batch)
        n_in += sum(r.input_tokens for r in results)
        n_out += sum(r.output_tokens for r in results)
        padded += max(p.tokens for p in batch) * len(batch)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and calls >= 2:
            break
    return EngineFigures(
        batch_size=batch_size,
        compute_type=translator.compute_types[pair.id],
        sentences_per_s=round(n_sent / elapsed, 2),
        tokens_per_s=round(n_out / elapsed, 1),
        input_tokens_per_s=round(n_in / elapsed, 1),
        sentences=n_sent,
        seconds=round(elapsed, 3),
        padding_ratio=round(1 - n_in / padded, 4) if padded else 0.0,
        calls=calls,
    )


def measure_ceiling(
    translator: CTranslate2Translator,
    pair: Pair,
    texts: Sequence[str],
    batcher: TokenBudgetBatcher,
) -> EngineFigures:
    """``texts`` tokenised once, planned by ``batcher`` and translated call by call.

    The clock covers tokenisation, planning and every call (what a pipeline
    must do too), after one untimed warm-up call.
    """
    translator.translate_batch(list(texts[:1]), pair)  # warm-up
    start = time.perf_counter()
    prepared = translator.prepare(texts, pair)
    plan = batcher.plan([p.tokens for p in prepared])
    n_out = 0
    for indices in plan.batches:
        results = translator.translate_prepared([prepared[i] for i in indices], pair)
        n_out += sum(r.output_tokens for r in results)
    elapsed = time.perf_counter() - start
    return EngineFigures(
        batch_size=None,
        compute_type=translator.compute_types[pair.id],
        sentences_per_s=round(len(texts) / elapsed, 2),
        tokens_per_s=round(n_out / elapsed, 1),
        input_tokens_per_s=round(plan.real_tokens / elapsed, 1),
        sentences=len(texts),
        seconds=round(elapsed, 3),
        padding_ratio=round(plan.padding_ratio, 4),
        calls=len(plan.batches),
    )
