"""Putting placeholder tokens back by attention when a model dropped them.

The run is translated again *without* its tokens, with the model's
attention (CTranslate2 ``return_attention``). Each token is anchored to the
source word it touches (the word after an opening tag or a standalone
placeholder, the word before a closing tag); the target word that attends
most to that source word, summed over their tokens (with a small preference
for the same relative position in the sentence), receives the token (before
it, or after it for a closing tag).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.engine.translator import AttentionBlock
from pipeline.fidelity.document import Run
from pipeline.fidelity.tokens import TOKEN_RE, token

_WORD = re.compile(r"\w+")
# Attention from a small model's chosen layer is noisy: between target words the
# model attends to about equally, prefer the one at about the same relative position.
POSITION_WEIGHT = 0.6


@dataclass(frozen=True, slots=True)
class Stripped:
    """A run's engine text without tokens, and where each token stood in it."""

    text: str
    # (token index, offset in ``text``, closes an element, stood between two spaces)
    marks: tuple[tuple[int, int, bool, bool], ...]


def strip_tokens(run: Run, engine_text: str) -> Stripped:
    """``engine_text`` (a form of ``run``) with its tokens taken out.

    A token between two spaces takes one of them along, so ``a ⟦0⟧ b``
    becomes ``a b`` rather than ``a  b``.
    """
    spans = run.spans()
    out: list[str] = []
    marks: list[tuple[int, int, bool, bool]] = []
    last = 0
    length = 0
    for m in TOKEN_RE.finditer(engine_text):
        chunk = engine_text[last : m.start()]
        spaced = chunk.endswith(" ") and engine_text[m.end() : m.end() + 1] == " "
        if spaced:
            chunk = chunk[:-1]
        out.append(chunk)
        length += len(chunk)
        index = int(m.group(1))
        marks.append((index, length, spans[index].kind == "close", spaced))
        last = m.end()
    out.append(engine_text[last:])
    return Stripped("".join(out), tuple(marks))


def _word_at(starts: list[int], ends: list[int], offset: int, closing: bool) -> int | None:
    """Index of the word (of those starting and ending at ``starts``, ``ends``) a token
    at ``offset`` belongs to."""
    if not starts:
        return None
    if closing:  # the last word ending at or before the offset
        before = bisect.bisect_right(ends, offset)
        return before - 1 if before else 0
    after = bisect.bisect_left(starts, offset)
    return after if after < len(starts) else len(starts) - 1


def _relative(index: int, count: int) -> float:
    return index / (count - 1) if count > 1 else 0.0


def _token_ranges(
    spans: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per word, the tokens whose span overlaps it: indices ``lo[w]`` to ``hi[w]`` (exclusive).

    Spans in text order have non-decreasing starts and ends, so the tokens
    overlapping a word are consecutive: those ending after its start and
    starting before its end.
    """
    starts = np.fromiter((a for a, _ in spans), dtype=np.int64, count=len(spans))
    ends = np.fromiter((b for _, b in spans), dtype=np.int64, count=len(spans))
    word_starts = np.fromiter((a for a, _ in words), dtype=np.int64, count=len(words))
    word_ends = np.fromiter((b for _, b in words), dtype=np.int64, count=len(words))
    lo = np.searchsorted(ends, word_starts, side="right")
    hi = np.maximum(lo, np.searchsorted(starts, word_ends, side="left"))
    return lo, hi


def _attended(
    attention: Sequence[AttentionBlock], targets: int, source_lo: int, source_hi: int
) -> np.ndarray:
    """Per target token, its attention summed over source tokens ``source_lo:source_hi``."""
    total = np.zeros(targets, dtype=np.float64)
    for block in attention:
        rows, cols = block.weights.shape
        lo = max(source_lo, block.first_source)
        hi = min(source_hi, block.first_source + cols)
        if lo < hi:
            first = block.first_target
            total[first : first + rows] += block.weights[
                :, lo - block.first_source : hi - block.first_source
            ].sum(axis=1)
    return total


def reinsert(
    stripped: Stripped,
    target: str,
    source_spans: Sequence[tuple[int, int]],
    target_spans: Sequence[tuple[int, int]],
    attention: Sequence[AttentionBlock],
) -> str:
    """``target`` with every token of ``stripped.marks`` put back by attention.

    Linear in the text per token put back: a long text's attention is scored
    per target word from prefix sums, never pair by pair.
    """
    src_words = [m.span() for m in _WORD.finditer(stripped.text)]
    tgt_words = [m.span() for m in _WORD.finditer(target)]
    src_starts, src_ends = [a for a, _ in src_words], [b for _, b in src_words]
    src_lo, src_hi = _token_ranges(source_spans, src_words)
    tgt_lo, tgt_hi = _token_ranges(target_spans, tgt_words)
    tgt_rows = np.maximum(1, tgt_hi - tgt_lo)
    count = len(tgt_words)
    relative = np.arange(count) / (count - 1) if count > 1 else np.zeros(count)
    inserts: list[tuple[int, int, str]] = []
    for order, (index, offset, closing, spaced) in enumerate(stripped.marks):
        word = _word_at(src_starts, src_ends, offset, closing)
        if word is None or not tgt_words:
            position = len(target) if closing else 0
        else:
            attended = _attended(attention, len(target_spans), src_lo[word], src_hi[word])
            prefix = np.concatenate(([0.0], np.cumsum(attended)))
            scores = (prefix[tgt_hi] - prefix[tgt_lo]) / tgt_rows
            top = scores.max() or 1.0
            where = _relative(word, len(src_words))
            fit = scores / top + POSITION_WEIGHT * (1 - np.abs(relative - where))
            start, end = tgt_words[int(np.argmax(fit))]
            position = end if closing else start
        text = token(index)
        if spaced:  # give back the space the token took along when it was stripped
            text = " " + text if closing else text + " "
        inserts.append((position, order, text))
    out: list[str] = []
    last = 0
    for position, _, tok in sorted(inserts):
        out.append(target[last:position])
        out.append(tok)
        last = position
    out.append(target[last:])
    return "".join(out)
