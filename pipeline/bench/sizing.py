"""How many requests a benchmark sends when the user names no count."""

from __future__ import annotations

import math

from pipeline.bench.workload import make_texts
from pipeline.contract.pairs import Pair
from pipeline.engine.translator import CTranslate2Translator

# at least this many requests (one at a time: a naive consumer's run), at most MAX_REQUESTS
MIN_REQUESTS, MIN_ONE_AT_A_TIME, MAX_REQUESTS = 100, 20, 2000


def requests_for(
    translator: CTranslate2Translator, pair: Pair, seconds: float, *, one_at_a_time: bool = False
) -> int:
    """As many requests as the engine handles in about ``seconds``.

    Estimated from the model's measured call cost on texts of the bench
    workload, in calls of 32 on every replica at once (or of one, one at a
    time); at least 100 (20 one at a time), at most 2,000.
    """
    texts = make_texts(100, 0.0, seed=99)
    sample = translator.prepare(texts, [pair] * len(texts))
    mean = math.ceil(sum(p.tokens for p in sample) / len(sample))
    batch, lo, side_by_side = (
        (1, MIN_ONE_AT_A_TIME, 1) if one_at_a_time else (32, MIN_REQUESTS, translator.inter_threads)
    )
    per_text = translator.cost_model(pair).seconds(batch, mean) / batch / side_by_side
    return max(lo, min(MAX_REQUESTS, math.floor(seconds / per_text)))
