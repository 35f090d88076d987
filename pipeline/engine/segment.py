"""Cutting a text into pieces a model can take, without losing a character.

Policy (the translator's, documented in :mod:`pipeline.engine.translator`):

1. Line breaks are kept out of the model: the text is cut at ``\\n`` and each
   line is translated on its own, so line structure survives exactly.
2. A line longer than the model's limit is cut at sentence boundaries
   (``.``, ``!``, ``?``, ``…`` and CJK full stops, followed by whitespace)
   and each sentence is translated on its own (models are trained on
   sentences; their quality drops near their length limit).
3. A sentence still over the limit is cut between words (packing as many
   words as fit), and a single word over the limit between characters.
   Nothing is ever dropped: joining the pieces gives back the input exactly.

Whitespace around each piece stays outside the model and is put back as is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_SENTENCE = re.compile(r".*?(?:[.!?…。！？]+[\"'”’)\]]*\s+|$)", re.DOTALL)
_WORD = re.compile(r"\S+\s*|\s+")


@dataclass(frozen=True, slots=True)
class Piece:
    """A slice of the input: ``lead + core + trail``; only ``core`` goes to the model."""

    lead: str
    core: str
    trail: str


def split_text(text: str, count: Callable[[str], int], limit: int) -> list[Piece]:
    """Cut ``text`` into pieces whose cores each count at most ``limit`` tokens.

    ``count`` gives the number of model tokens of a string. Joining
    ``lead + core + trail`` over the result gives ``text`` back exactly.
    """
    if limit < 1:
        raise ValueError("limit must be >= 1")
    chunks: list[str] = []
    for line in _LINE.findall(text):
        if count(line.strip()) <= limit:
            chunks.append(line)
        else:
            for sentence in _SENTENCE.findall(line):
                if count(sentence.strip()) <= limit:
                    chunks.append(sentence)
                else:
                    chunks.extend(_split_sentence(sentence, count, limit))
    return [_piece(c) for c in chunks if c]


def _split_sentence(sentence: str, count: Callable[[str], int], limit: int) -> list[str]:
    out: list[str] = []
    words = [w for w in _WORD.findall(sentence) if w]
    for start, end in _greedy_runs(words, count, limit):
        run = "".join(words[start:end])
        if end - start == 1 and count(run.strip()) > limit:
            out.extend(_split_word(run, count, limit))  # one word over the limit
        else:
            out.append(run)
    return out


def _split_word(word: str, count: Callable[[str], int], limit: int) -> list[str]:
    # a single character over the limit still makes a piece of its own
    return ["".join(word[a:b]) for a, b in _greedy_runs(list(word), count, limit)]


def _greedy_runs(
    parts: list[str], count: Callable[[str], int], limit: int
) -> list[tuple[int, int]]:
    """Consecutive runs ``[start, end)`` of ``parts``, each as long as fits within ``limit``.

    The same runs as adding parts one by one until the next would not fit,
    but each run's end is found by galloping and bisection, so a long text
    costs O(runs · log n) counts instead of one count per part on an ever
    longer string (token counts grow with the text, so "fits" only turns
    false once). A part that does not fit on its own is a run of one.
    """

    def fits(start: int, end: int) -> bool:
        return count("".join(parts[start:end]).strip()) <= limit

    runs = []
    start, n = 0, len(parts)
    while start < n:
        good, step = start + 1, 1  # a run has at least one part
        bad = n + 1
        while good + step <= n:
            if fits(start, good + step):
                good += step
                step *= 2
            else:
                bad = good + step
                break
        while bad - good > 1:
            mid = (good + bad) // 2
            if fits(start, mid):
                good = mid
            else:
                bad = mid
        runs.append((start, good))
        start = good
    return runs


def _piece(chunk: str) -> Piece:
    core = chunk.strip()
    if not core:
        return Piece(chunk, "", "")
    start = chunk.index(core)
    return Piece(chunk[:start], core, chunk[start + len(core) :])
