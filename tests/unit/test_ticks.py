"""Worker heartbeats: the records a worker publishes to translate.ticks."""

from __future__ import annotations

import json

import jsonschema

from pipeline.messages import Tick
from pipeline.settings import PROJECT_ROOT
from pipeline.ticks import TickSource


class StepClock:
    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def test_one_tick_per_served_pair_with_the_clock() -> None:
    clock = StepClock(1_700_000_000_000)
    source = TickSource(["en_de", "de_en", "en_de"], "worker-a", clock)
    first = source.records()
    assert [(topic, key) for topic, key, _ in first] == [
        ("translate.ticks", b"de_en"),
        ("translate.ticks", b"en_de"),
    ]
    ticks = [Tick.from_json(value) for _, _, value in first]
    assert {t.emitted_at for t in ticks} == {1_700_000_001_000}, "one clock reading per round"
    assert {(t.worker, t.pair) for t in ticks} == {("worker-a", "de_en"), ("worker-a", "en_de")}
    second = [Tick.from_json(value) for _, _, value in source.records()]
    assert {t.emitted_at for t in second} == {1_700_000_002_000}


def test_ticks_follow_the_json_schema() -> None:
    schema = json.loads((PROJECT_ROOT / "schemas" / "tick.v1.schema.json").read_text())
    for _, _, value in TickSource(["en_en-XA"], "w", lambda: 5).records():
        jsonschema.validate(json.loads(value), schema)
        assert json.loads(value) == {
            "schema_version": 1,
            "worker": "w",
            "pair": "en_en-XA",
            "emitted_at": 5,
        }


def test_no_pairs_no_ticks_and_another_topic() -> None:
    assert TickSource([], "w").records() == []
    ((topic, _, _),) = TickSource(["en_de"], "w", topic="test.ticks").records()
    assert topic == "test.ticks"
