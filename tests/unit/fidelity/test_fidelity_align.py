"""Placeholders put back by attention: the prefix-sum scoring against the pair-by-pair one.

``reinsert`` scores each target word by the attention its tokens paid to the
anchor word's tokens. It used to sum that pair by pair for every word, which
on a 14,500-token text with 35 placeholders held the worker's event loop for
80 s; the reference below is that definition, kept as the oracle.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine.translator import AttentionBlock
from pipeline.fidelity.align import POSITION_WEIGHT, Stripped, reinsert
from pipeline.fidelity.tokens import token

_WORD_CHARS = st.text(alphabet="abcdefgh", min_size=1, max_size=5)


def _reference(
    stripped: Stripped,
    target: str,
    source_spans: list[tuple[int, int]],
    target_spans: list[tuple[int, int]],
    dense: np.ndarray,
) -> str:
    """The definition: every pair of tokens, every word, every mark."""
    import re

    words = re.compile(r"\w+")
    src_words = [m.span() for m in words.finditer(stripped.text)]
    tgt_words = [m.span() for m in words.finditer(target)]

    def tokens_in(spans: list[tuple[int, int]], word: tuple[int, int]) -> list[int]:
        return [i for i, (a, b) in enumerate(spans) if a < word[1] and b > word[0]]

    def relative(index: int, count: int) -> float:
        return index / (count - 1) if count > 1 else 0.0

    inserts = []
    for order, (index, offset, closing, spaced) in enumerate(stripped.marks):
        if closing:
            before = [i for i, (_, end) in enumerate(src_words) if end <= offset]
            word = before[-1] if before else 0
        else:
            after = [i for i, (start, _) in enumerate(src_words) if start >= offset]
            word = after[0] if after else len(src_words) - 1
        src_tokens = tokens_in(source_spans, src_words[word])
        scores = []
        for tgt_word in tgt_words:
            rows = tokens_in(target_spans, tgt_word)
            total = sum(float(dense[i][j]) for i in rows for j in src_tokens)
            scores.append(total / max(1, len(rows)))
        top = max(scores) or 1.0
        where = relative(word, len(src_words))
        best = max(
            range(len(tgt_words)),
            key=lambda w: (
                scores[w] / top + POSITION_WEIGHT * (1 - abs(relative(w, len(tgt_words)) - where))
            ),
        )
        start, end = tgt_words[best]
        text = token(index)
        if spaced:
            text = " " + text if closing else text + " "
        inserts.append((end if closing else start, order, text))
    out, last = [], 0
    for position, _, tok in sorted(inserts):
        out += [target[last:position], tok]
        last = position
    return "".join([*out, target[last:]])


def _char_spans(text: str) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(len(text))]


@settings(max_examples=150, deadline=None)
@given(
    source_words=st.lists(_WORD_CHARS, min_size=1, max_size=8),
    target_words=st.lists(_WORD_CHARS, min_size=1, max_size=8),
    pieces=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
    mark_count=st.integers(1, 4),
)
def test_prefix_sum_scoring_places_every_token_where_the_definition_does(
    source_words: list[str],
    target_words: list[str],
    pieces: int,
    seed: int,
    mark_count: int,
) -> None:
    rng = np.random.default_rng(seed)
    source, target = " ".join(source_words), " ".join(target_words)
    source_spans, target_spans = _char_spans(source), _char_spans(target)
    # block-diagonal attention (pieces translated apart), small integers: sums are exact
    src_cuts = np.linspace(0, len(source), pieces + 1).astype(int)
    tgt_cuts = np.linspace(0, len(target), pieces + 1).astype(int)
    dense = np.zeros((len(target), len(source)), dtype=np.float32)
    blocks = []
    for k in range(pieces):
        (t0, t1), (s0, s1) = tgt_cuts[k : k + 2], src_cuts[k : k + 2]
        weights = rng.integers(0, 4, size=(t1 - t0, s1 - s0)).astype(np.float32)
        dense[t0:t1, s0:s1] = weights
        blocks.append(AttentionBlock(int(t0), int(s0), weights))
    marks = tuple(
        (
            i,
            int(rng.integers(0, len(source) + 1)),
            bool(rng.integers(0, 2)),
            bool(rng.integers(0, 2)),
        )
        for i in range(mark_count)
    )
    stripped = Stripped(source, marks)

    got = reinsert(stripped, target, source_spans, target_spans, blocks)

    assert got == _reference(stripped, target, source_spans, target_spans, dense)


def test_a_token_goes_to_the_target_word_attending_most_to_its_anchor_across_pieces() -> None:
    """Two pieces: the anchor word's attention lives only in the second piece's block."""
    source, target = "aa bb cc dd", "ww xx yy zz"
    spans = _char_spans(source)
    first = np.zeros((5, 5), dtype=np.float32)
    second = np.zeros((6, 6), dtype=np.float32)
    second[1:3, 4:6] = 1.0  # target "yy" (tokens 6, 7) attends to source "dd" (tokens 9, 10)
    blocks = [AttentionBlock(0, 0, first), AttentionBlock(5, 5, second)]
    stripped = Stripped(source, ((0, source.index("dd"), False, True),))

    assert reinsert(stripped, target, spans, _char_spans(target), blocks) == "ww xx ⟦0⟧ yy zz"
