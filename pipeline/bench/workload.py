"""Benchmark workloads: generated sentences with a chosen share of repeats."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from pipeline.contract.pairs import Pair
from pipeline.sample_sentences import SentenceGenerator


def make_texts(n: int, repeat_ratio: float, seed: int = 1) -> list[str]:
    """``n`` texts of which ``repeat_ratio`` are repeats of earlier distinct ones."""
    if not 0.0 <= repeat_ratio < 1.0:
        raise ValueError("repeat_ratio must be in [0, 1)")
    rng = random.Random(seed)
    generator = SentenceGenerator(seed, min_words=3, max_words=25)
    distinct_n = max(1, round(n * (1 - repeat_ratio)))
    distinct: list[str] = []
    seen: set[str] = set()
    while len(distinct) < distinct_n:
        sentence = generator.sentence()
        if sentence not in seen:
            seen.add(sentence)
            distinct.append(sentence)
    texts = distinct + [rng.choice(distinct) for _ in range(n - distinct_n)]
    rng.shuffle(texts)
    return texts


def bulk_run_command(
    corpus: Path, pair: Pair, output: Path, job_id: str, tenant: str, *extra: str
) -> list[str]:
    """``babelstream bulk run`` of ``corpus`` as users run it, for a process of its own."""
    return [
        *(sys.executable, "-m", "pipeline", "bulk", "run", str(corpus)),
        *("--src", pair.source, "--tgt", pair.target, "--output", str(output)),
        *("--job-id", job_id, "--tenant", tenant, *extra),
    ]
