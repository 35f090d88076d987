"""A bench's default size, from the demo model's measured call cost (as ``bench`` runs it)."""

from __future__ import annotations

import pytest

from pipeline.bench.sizing import MAX_REQUESTS, MIN_ONE_AT_A_TIME, MIN_REQUESTS, requests_for
from pipeline.contract.pairs import Pair
from pipeline.engine.translator import CTranslate2Translator
from pipeline.settings import load_settings

EN_XA = Pair.parse("en_en-XA")


@pytest.fixture(scope="module")
def translator() -> CTranslate2Translator:
    return CTranslate2Translator.from_settings(load_settings().engine, [EN_XA.id])


def test_the_default_size_grows_with_the_time_and_stays_in_bounds(
    translator: CTranslate2Translator,
) -> None:
    short = requests_for(translator, EN_XA, 0.5)
    longer = requests_for(translator, EN_XA, 5.0)
    assert MIN_REQUESTS <= short <= longer <= MAX_REQUESTS
    assert short < MAX_REQUESTS, "half a second holds fewer than the most requests"
    assert requests_for(translator, EN_XA, 1e-6) == MIN_REQUESTS
    assert requests_for(translator, EN_XA, 1e6) == MAX_REQUESTS


def test_one_at_a_time_takes_fewer_requests_in_the_same_time(
    translator: CTranslate2Translator,
) -> None:
    batched = requests_for(translator, EN_XA, 5.0)
    alone = requests_for(translator, EN_XA, 5.0, one_at_a_time=True)
    assert MIN_ONE_AT_A_TIME <= alone < batched
