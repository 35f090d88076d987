"""What a translator can do beyond :class:`~pipeline.engine.translator.Translator`: one
protocol per optional capability, checked here and nowhere else.

A translator must have ``model_id``, ``translate_batch`` and ``count_tokens``.
The rest is optional, and each part has a fallback:

=====================  =====================  ============================  =====================
capability             protocol               used by                       without it
=====================  =====================  ============================  =====================
measured call costs    :class:`CostMeasured`  the batch planner             :data:`DEFAULT_COST`
staged calls           ``StagedTranslator``   the engine lane (overlap.py)  one whole-text stage
attention              :class:`Aligning`      fidelity re-insertion         rungs without it
vocabulary             :class:`VocabularyAware`  fidelity (byte fallback)   no character unknown
=====================  =====================  ============================  =====================

The worker logs what its translator has at start (:meth:`Capabilities.describe`),
so a fallback is seen, not silent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipeline.contract.pairs import Pair
from pipeline.engine.costs import DEFAULT_COST, CostModel
from pipeline.engine.overlap import StagedTranslator
from pipeline.engine.translator import AlignedTranslation


@runtime_checkable
class CostMeasured(Protocol):
    """A translator that measured what its calls cost (the batch planner cuts by it)."""

    def cost_model(self, pair: Pair) -> CostModel: ...


@runtime_checkable
class Aligning(Protocol):
    """A translator that can return attention with its translations."""

    def translate_aligned(self, texts: Sequence[str], pair: Pair) -> list[AlignedTranslation]: ...


@runtime_checkable
class VocabularyAware(Protocol):
    """A translator that can name the characters its model knows only as bytes."""

    def unknown_characters(self, text: str, pair: Pair) -> frozenset[str]: ...


def cost_of(translator: object, pair: Pair) -> CostModel:
    """The translator's measured call costs for ``pair``, or :data:`DEFAULT_COST`."""
    return translator.cost_model(pair) if isinstance(translator, CostMeasured) else DEFAULT_COST


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Which optional capabilities one translator has."""

    measured_costs: bool
    staged: bool
    aligned: bool
    vocabulary: bool

    def describe(self) -> str:
        """``measured call costs, staged calls, attention; without: vocabulary checks``."""
        names = {
            "measured call costs": self.measured_costs,
            "staged calls": self.staged,
            "attention": self.aligned,
            "vocabulary checks": self.vocabulary,
        }
        has = [name for name, present in names.items() if present]
        lacks = [name for name, present in names.items() if not present]
        text = ", ".join(has) or "none"
        return f"{text}; without: {', '.join(lacks)}" if lacks else text


def capabilities_of(translator: object) -> Capabilities:
    """What ``translator`` can do beyond the three required members."""
    return Capabilities(
        measured_costs=isinstance(translator, CostMeasured),
        staged=isinstance(translator, StagedTranslator),
        aligned=isinstance(translator, Aligning),
        vocabulary=isinstance(translator, VocabularyAware),
    )
