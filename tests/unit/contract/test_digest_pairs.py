"""Digests and pair ids."""

from __future__ import annotations

import pytest

from pipeline.contract.digest import content_digest
from pipeline.contract.pairs import Pair, bulk_work_topic, legacy_pair_topics, work_topic
from pipeline.errors import ContractError

BASE = dict(model_id="m", source_lang="en", target_lang="de", text="Hello world")


def test_digest_is_stable_and_128_bit() -> None:
    assert content_digest(**BASE) == content_digest(**BASE)
    assert len(content_digest(**BASE)) == 32


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": "m2"},
        {"source_lang": "fr"},
        {"target_lang": "en"},
        {"tenant": "acme"},
        {"domain": "legal"},
        {"text": "Hello world!"},
        {"text": "Hello"},
        {"text": "Hello world" + " " * 1},
    ],
)
def test_every_input_changes_the_digest(change: dict[str, str]) -> None:
    assert content_digest(**{**BASE, **change}) != content_digest(**BASE)


def test_long_texts_sharing_a_prefix_differ() -> None:
    prefix = "x" * 10_000
    assert content_digest(**{**BASE, "text": prefix + "a"}) != content_digest(
        **{**BASE, "text": prefix + "b"}
    )


def test_field_boundaries_cannot_collide() -> None:
    a = content_digest(**{**BASE, "tenant": "ab", "domain": "c"})
    b = content_digest(**{**BASE, "tenant": "a", "domain": "bc"})
    assert a != b


def test_nfc_equivalent_texts_share_a_digest() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert content_digest(**{**BASE, "text": composed}) == content_digest(
        **{**BASE, "text": decomposed}
    )


@pytest.mark.parametrize("pair_id", ["en_de", "en_en-XA", "zh-Hans_en", "en-XA_en"])
def test_pair_id_round_trip(pair_id: str) -> None:
    assert Pair.parse(pair_id).id == pair_id


@pytest.mark.parametrize("bad", ["ende", "en_", "_de", "en_de_fr"])
def test_bad_pair_ids(bad: str) -> None:
    with pytest.raises(ContractError):
        Pair.parse(bad)


def test_topic_names() -> None:
    assert work_topic("opus-mt-en-de") == "translate.work.opus-mt-en-de"
    assert bulk_work_topic("opus-mt-en-de") == "translate.work-bulk.opus-mt-en-de"
    assert legacy_pair_topics(Pair("en", "en-XA")) == (
        "translate.requests.en_en-XA",
        "translate.bulk.en_en-XA",
    )
