"""A rule-based stand-in for the engine in fidelity unit tests: the en-XA character map.

Token ``⟦n⟧`` has no letter, so the map keeps it, as the demo model learned to.
``drop``/``corrupt`` make it misbehave the way models do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.contract.pairs import Pair
from pipeline.engine.translator import AlignedTranslation, AttentionBlock, Translation, Translator
from pipeline.fidelity.tokens import TOKEN_RE
from pipeline.pseudo_locale import to_pseudo


class PseudoTranslator(Translator):
    """en -> en-XA by the character map; may drop tokens or corrupt characters."""

    model_id = "pseudo"

    def __init__(self, *, drop: bool = False, corrupt: str = "", align: bool = True) -> None:
        self.drop = drop
        self.corrupt = corrupt  # characters that come out as U+FFFD
        self.align = align
        self.calls: list[list[str]] = []

    def count_tokens(self, text: str, pair: Pair) -> int:
        return len(text)

    def _one(self, text: str) -> str:
        out = to_pseudo(text)
        if self.drop:
            out = TOKEN_RE.sub("", out)
        for ch in self.corrupt:
            out = out.replace(ch, "\ufffd")
        return out

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        self.calls.append(list(texts))
        return [Translation(self._one(t), len(t), len(t)) for t in texts]

    def unknown_characters(self, text: str, pair: Pair) -> frozenset[str]:
        return frozenset(c for c in text if c in self.corrupt)


class AligningPseudoTranslator(PseudoTranslator):
    """Adds attention: the map is character for character, so the alignment is the diagonal."""

    def translate_aligned(self, texts: Sequence[str], pair: Pair) -> list[AlignedTranslation]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            target = to_pseudo(text)
            spans = tuple((i, i + 1) for i in range(len(text)))
            attention = (AttentionBlock(0, 0, np.eye(len(text), dtype=np.float32)),)
            out.append(AlignedTranslation(target, len(text), len(text), spans, spans, attention))
        return out
