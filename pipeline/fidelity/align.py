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

import re
from collections.abc import Sequence
from dataclasses import dataclass

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


def _word_at(words: list[tuple[int, int]], offset: int, closing: bool) -> int | None:
    """Index of the word a token at ``offset`` belongs to."""
    if not words:
        return None
    if closing:
        before = [i for i, (_, end) in enumerate(words) if end <= offset]
        return before[-1] if before else 0
    after = [i for i, (start, _) in enumerate(words) if start >= offset]
    return after[0] if after else len(words) - 1


def _relative(index: int, count: int) -> float:
    return index / (count - 1) if count > 1 else 0.0


def _tokens_in(spans: Sequence[tuple[int, int]], word: tuple[int, int]) -> list[int]:
    return [i for i, (a, b) in enumerate(spans) if a < word[1] and b > word[0]]


def reinsert(
    stripped: Stripped,
    target: str,
    source_spans: Sequence[tuple[int, int]],
    target_spans: Sequence[tuple[int, int]],
    attention: Sequence[Sequence[float]],
) -> str:
    """``target`` with every token of ``stripped.marks`` put back by attention."""
    src_words = [m.span() for m in _WORD.finditer(stripped.text)]
    tgt_words = [m.span() for m in _WORD.finditer(target)]
    inserts: list[tuple[int, int, str]] = []
    for order, (index, offset, closing, spaced) in enumerate(stripped.marks):
        word = _word_at(src_words, offset, closing)
        if word is None or not tgt_words:
            position = len(target) if closing else 0
        else:
            src_tokens = _tokens_in(source_spans, src_words[word])
            scores = []
            for tgt_word in tgt_words:
                rows = _tokens_in(target_spans, tgt_word)
                scores.append(
                    sum(attention[i][j] for i in rows for j in src_tokens) / max(1, len(rows))
                )
            top = max(scores) or 1.0
            where = _relative(word, len(src_words))
            best = max(
                range(len(tgt_words)),
                key=lambda w: (
                    scores[w] / top
                    + POSITION_WEIGHT * (1 - abs(_relative(w, len(tgt_words)) - where))
                ),
            )
            start, end = tgt_words[best]
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
