"""The engine benches' own arithmetic: the warm-up before timing, and the A-B-A ceiling."""

from __future__ import annotations

import pytest

from pipeline.bench import engine
from pipeline.bench.report import EngineFigures, bracketed_rate
from pipeline.contract.pairs import Pair
from tests.fakes import FakeClock

PAIR = Pair.parse("en_en-XB")


class _Translator:
    """Each call takes ``call_s`` of the fake clock and is recorded."""

    def __init__(self, clock: FakeClock, call_s: float) -> None:
        self.clock = clock
        self.call_s = call_s
        self.calls: list[object] = []

    def translate_prepared(self, batch: object) -> list[object]:
        self.calls.append(batch)
        self.clock.now += self.call_s
        return []


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock(0.0)
    monkeypatch.setattr(engine.time, "perf_counter", fake)
    return fake


def test_warm_up_cycles_through_the_batches_until_its_seconds_are_spent(clock):
    translator = _Translator(clock, call_s=0.4)
    engine.warm_up(translator, ["a", "b", "c"], seconds=2.0)  # type: ignore[arg-type]
    # 5 calls of 0.4 s reach 2 s: the batches in turn, from the first again
    assert translator.calls == ["a", "b", "c", "a", "b"]


def test_warm_up_makes_one_call_however_long_it_takes(clock):
    translator = _Translator(clock, call_s=10.0)
    engine.warm_up(translator, ["a", "b"], seconds=3.0)  # type: ignore[arg-type]
    assert translator.calls == ["a"]


def _ceiling(seconds: float, sentences: int = 1000) -> EngineFigures:
    return EngineFigures(
        batch_size=None,
        compute_type="int8",
        sentences_per_s=round(sentences / seconds, 2),
        tokens_per_s=0.0,
        input_tokens_per_s=0.0,
        sentences=sentences,
        seconds=seconds,
    )


def test_bracketed_rate_is_the_workload_over_the_mean_time_of_both_ceilings():
    # 20 s before, 30 s after: 1000 sentences in 25 s, not the mean of 50 and 33.3 per s
    assert bracketed_rate(_ceiling(20.0), _ceiling(30.0)) == pytest.approx(40.0)


def test_bracketed_rate_refuses_two_different_workloads():
    with pytest.raises(ValueError, match="same workload"):
        bracketed_rate(_ceiling(20.0), _ceiling(20.0, sentences=999))
