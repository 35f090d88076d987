"""The engine's own limits, before any queueing: fixed batch sizes and the planned ceiling.

* :func:`measure_fixed` — unsorted batches of ``batch_size`` generated
  sentences straight into the model, for at least ``min_seconds``: what
  batching is worth on this model and machine.
* :func:`measure_ceiling` — a workload's texts tokenised once, planned by the
  worker's own cost-based batcher (length-sorted, same token budget) and run
  call by call, as many at once as the engine has replicas: the most any
  pipeline around this engine can do with them.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pipeline.bench.cpu import measured_cpu
from pipeline.bench.report import EngineFigures
from pipeline.contract.pairs import Pair
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import CTranslate2Translator, PreparedText
from pipeline.sample_sentences import SentenceGenerator

# seconds of untimed engine calls before a measurement (see warm_up)
WARM_UP_S = 3.0


def generated_sentences(n: int, seed: int = 7) -> list[str]:
    """``n`` held-out generated sentences of 3-40 words."""
    generator = SentenceGenerator(seed, heldout=True, min_words=3, max_words=40)
    return [generator.sentence() for _ in range(n)]


def warm_up(
    translator: CTranslate2Translator,
    batches: Sequence[Sequence[PreparedText]],
    seconds: float = WARM_UP_S,
) -> None:
    """Translate ``batches`` in turn, untimed, for at least ``seconds`` (at least one call).

    A process's first seconds of engine calls run slower than the same calls
    later: one workload's ceiling took 17.2 s in a fresh process, then 13.3
    and 13.8 s, and 16.0 s after a warm-up of its largest call alone, but
    13.3–13.8 s after 3 s of its own calls. A worker measured against the
    ceiling has made many calls by then.
    """
    until = time.perf_counter() + seconds
    for batch in itertools.cycle(batches):
        translator.translate_prepared(batch)
        if time.perf_counter() >= until:
            return


def measure_fixed(
    translator: CTranslate2Translator,
    pair: Pair,
    prepared: Sequence[PreparedText],
    *,
    batch_size: int,
    min_seconds: float,
) -> EngineFigures:
    """Batches of ``batch_size`` prepared texts in their given order, after a warm-up."""
    batches = [prepared[i : i + batch_size] for i in range(0, len(prepared), batch_size)]
    warm_up(translator, batches)
    n_sent = n_in = n_out = calls = 0
    padded = 0
    start = time.perf_counter()
    while True:
        batch = batches[(calls + 1) % len(batches)]
        results = translator.translate_prepared(batch)
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
        compute_type=translator.compute_type(pair),
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

    The calls run side by side, one per replica (``inter_threads``), as a
    worker runs them. The clock covers tokenisation, planning and every call
    (what a pipeline must do too), after an untimed :func:`warm_up` on the
    same plan.
    """
    warm = translator.prepare(texts, [pair] * len(texts))
    warm_up(
        translator,
        [[warm[i] for i in b] for b in batcher.plan([p.tokens for p in warm]).batches],
    )
    start = time.perf_counter()
    with measured_cpu(os.getpid()) as meter:
        prepared = translator.prepare(texts, [pair] * len(texts))
        plan = batcher.plan([p.tokens for p in prepared])
        with ThreadPoolExecutor(translator.inter_threads) as replicas:
            outputs = replicas.map(
                lambda indices: translator.translate_prepared([prepared[i] for i in indices]),
                plan.batches,
            )
            n_out = sum(r.output_tokens for results in outputs for r in results)
    elapsed = time.perf_counter() - start
    return EngineFigures(
        batch_size=None,
        compute_type=translator.compute_type(pair),
        sentences_per_s=round(len(texts) / elapsed, 2),
        tokens_per_s=round(n_out / elapsed, 1),
        input_tokens_per_s=round(plan.real_tokens / elapsed, 1),
        sentences=len(texts),
        seconds=round(elapsed, 3),
        padding_ratio=round(plan.padding_ratio, 4),
        calls=len(plan.batches),
        cpu=meter.use,
    )
