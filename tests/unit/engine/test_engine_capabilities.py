"""The engine contract's optional capabilities: found by protocol, with their fallbacks."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.contract.pairs import Pair
from pipeline.engine.capabilities import capabilities_of, cost_of
from pipeline.engine.costs import DEFAULT_COST, CostModel
from pipeline.engine.translator import Translation

EN_XA = Pair.parse("en_en-XA")
MEASURED = CostModel(per_call_s=1e-3, per_step_s=1e-5, per_token_s=1e-6)


class PlainTranslator:
    """Only the three required members."""

    model_id = "plain"

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        return [Translation(text.upper(), len(text), len(text)) for text in texts]

    def count_tokens(self, text: str, pair: Pair) -> int:
        return len(text)


class MeasuredTranslator(PlainTranslator):
    def cost_model(self, pair: Pair) -> CostModel:
        return MEASURED

    def unknown_characters(self, text: str, pair: Pair) -> frozenset[str]:
        return frozenset()


def test_a_plain_translator_gets_every_fallback() -> None:
    found = capabilities_of(PlainTranslator())
    assert (found.measured_costs, found.staged, found.aligned, found.vocabulary) == (
        False,
        False,
        False,
        False,
    )
    assert found.describe() == (
        "none; without: measured call costs, staged calls, attention, vocabulary checks"
    )
    assert cost_of(PlainTranslator(), EN_XA) == DEFAULT_COST


def test_capabilities_are_found_by_their_members() -> None:
    found = capabilities_of(MeasuredTranslator())
    assert found.measured_costs and found.vocabulary and not found.aligned
    assert found.describe() == (
        "measured call costs, vocabulary checks; without: staged calls, attention"
    )
    assert cost_of(MeasuredTranslator(), EN_XA) == MEASURED
