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
    return _pack(_WORD.findall(sentence), count, limit, _split_word)


def _split_word(word: str, count: Callable[[str], int], limit: int) -> list[str]:
    out: list[str] = []
    current = ""
    for ch in word:
        if current and count((current + ch).strip()) > limit:
            out.append(current)
            current = ""
        current += ch
    if current:
        out.append(current)
    return out


def _pack(
    parts: list[str],
    count: Callable[[str], int],
    limit: int,
    smaller: Callable[[str, Callable[[str], int], int], list[str]],
) -> list[str]:
    """Greedily join consecutive ``parts`` up to ``limit``; cut parts too long on their own."""
    out: list[str] = []
    current = ""
    for part in parts:
        if not part:
            continue
        if count(part.strip()) > limit:
            if current:
                out.append(current)
                current = ""
            out.extend(smaller(part, count, limit))
        elif current and count((current + part).strip()) > limit:
            out.append(current)
            current = part
        else:
            current += part
    if current:
        out.append(current)
    return out


def _piece(chunk: str) -> Piece:
    core = chunk.strip()
    if not core:
        return Piece(chunk, "", "")
    start = chunk.index(core)
    return Piece(chunk[:start], core, chunk[start + len(core) :])
