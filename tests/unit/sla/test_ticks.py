"""Worker heartbeats: the records a worker publishes to translate.ticks."""

from __future__ import annotations

import json

import jsonschema

from pipeline.contract.messages import Tick
from pipeline.settings import PROJECT_ROOT
from pipeline.sla.ticks import TickSource


class StepClock:
    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def test_one_tick_per_worker_whatever_its_pairs() -> None:
    """The SLA job's watermark is one for all pairs: one tick a worker moves it for each."""
    clock = StepClock(1_700_000_000_000)
    source = TickSource("en_de", "worker-a", clock)
    topic, key, value = source.record()
    assert (topic, key) == ("translate.ticks", b"worker-a")
    tick = Tick.from_json(value)
    assert (tick.worker, tick.pair, tick.emitted_at) == ("worker-a", "en_de", 1_700_000_001_000)
    assert Tick.from_json(source.record()[2]).emitted_at == 1_700_000_002_000


def test_ticks_follow_the_json_schema() -> None:
    schema = json.loads((PROJECT_ROOT / "schemas" / "tick.v1.schema.json").read_text())
    _, _, value = TickSource("en_en-XA", "w", lambda: 5).record()
    jsonschema.validate(json.loads(value), schema)
    assert json.loads(value) == {
        "schema_version": 1,
        "worker": "w",
        "pair": "en_en-XA",
        "emitted_at": 5,
    }


def test_another_topic() -> None:
    topic, _, _ = TickSource("en_de", "w", topic="test.ticks").record()
    assert topic == "test.ticks"
