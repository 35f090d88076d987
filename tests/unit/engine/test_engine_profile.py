"""Call-cost fitting, compute-type choice by measurement and the profile cache (no model)."""

from __future__ import annotations

import pytest

from pipeline.engine.costs import CostModel, Timing, calibrate, fit_cost_model
from pipeline.engine.profile import (
    EngineProfile,
    ProfileCache,
    candidates,
    choose_compute_type,
    measure_profile,
)
from tests.fakes import FakeClock


class FakeEngine:
    """A translator of known speed: each call advances the fake clock by its modelled time."""

    def __init__(self, clock: FakeClock, cost: CostModel) -> None:
        self.clock = clock
        self.cost = cost
        self.calls: list[tuple[int, int]] = []

    def run(self, n: int, max_len: int) -> None:
        self.calls.append((n, max_len))
        self.clock.now += self.cost.seconds(n, max_len)


def test_fit_recovers_a_known_model():
    truth = CostModel(per_call_s=0.004, per_step_s=0.002, per_token_s=0.0003)
    timings = [Timing(n, m, truth.seconds(n, m)) for n, m in [(1, 8), (1, 32), (8, 8), (16, 24)]]
    fitted = fit_cost_model(timings)
    assert fitted.per_call_s == pytest.approx(0.004)
    assert fitted.per_step_s == pytest.approx(0.002)
    assert fitted.per_token_s == pytest.approx(0.0003)


def test_fit_keeps_coefficients_non_negative():
    # time falls with length at n=1 (noise): plain least squares would go negative
    timings = [Timing(1, 8, 0.010), Timing(1, 32, 0.009), Timing(8, 8, 0.03), Timing(8, 32, 0.09)]
    fitted = fit_cost_model(timings)
    assert min(fitted.per_call_s, fitted.per_step_s, fitted.per_token_s) >= 0
    with pytest.raises(ValueError):
        fit_cost_model(timings[:2])


def test_calibrate_times_every_shape_after_a_warm_up():
    clock = FakeClock(0.0)
    engine = FakeEngine(clock, CostModel(0.01, 0.001, 0.0002))
    model, timings = calibrate(engine.run, [(1, 8), (4, 16), (8, 8)], repeats=2, clock=clock)
    assert engine.calls == [(1, 8), (1, 8), (1, 8), (4, 16), (4, 16), (8, 8), (8, 8)]
    assert [(t.n, t.max_len) for t in timings] == [(1, 8), (4, 16), (8, 8)]
    assert model.seconds(32, 40) == pytest.approx(engine.cost.seconds(32, 40))


def test_chooser_keeps_the_fastest_compute_type():
    clock = FakeClock(0.0)
    # float32 is the fast one here (as on the demo model at large batches)
    speeds = {"int8": 0.002, "int8_float32": 0.003, "float32": 0.001}
    loaded: list[str] = []

    def load(ctype: str) -> FakeEngine:
        loaded.append(ctype)
        return FakeEngine(clock, CostModel(0.0, 0.0, speeds[ctype] / 100))

    choice = choose_compute_type(
        ["int8", "int8_float32", "float32"], load, shape=(10, 10), min_seconds=0.05, clock=clock
    )
    assert loaded == ["int8", "int8_float32", "float32"]
    assert choice.compute_type == "float32"
    assert choice.tokens_per_s == {
        "int8": pytest.approx(50_000),
        "int8_float32": pytest.approx(33_333.3),
        "float32": pytest.approx(100_000),
    }


def test_chooser_ties_go_to_the_earlier_candidate():
    clock = FakeClock(0.0)
    choice = choose_compute_type(
        ["int8", "float32"],
        lambda c: FakeEngine(clock, CostModel(0.0, 0.0, 1e-4)),
        shape=(4, 4),
        min_seconds=0.01,
        clock=clock,
    )
    assert choice.compute_type == "int8"
    with pytest.raises(ValueError):
        choose_compute_type(
            [], lambda c: FakeEngine(clock, CostModel(1, 0, 0)), shape=(1, 1), min_seconds=1
        )


def test_profile_measures_the_chosen_type_and_caches_it(tmp_path):
    clock = FakeClock(0.0)
    costs = {"int8": CostModel(0.001, 0.0, 1e-4), "float32": CostModel(0.001, 0.0, 3e-4)}
    profile = measure_profile(
        "auto",
        ["int8", "float32"],
        lambda c: FakeEngine(clock, costs[c]),
        shape=(8, 8),
        min_seconds=0.01,
        clock=clock,
    )
    assert profile.compute_type == "int8"
    assert profile.cost.seconds(16, 20) == pytest.approx(costs["int8"].seconds(16, 20))
    explicit = measure_profile(
        "float32",
        ["int8", "float32"],
        lambda c: FakeEngine(clock, costs[c]),
        shape=(8, 8),
        min_seconds=0.01,
        clock=clock,
    )
    assert explicit.compute_type == "float32" and explicit.tokens_per_s == {}

    cache = ProfileCache(tmp_path / "engine" / "profiles.json")
    assert cache.get("k") is None
    cache.put("k", profile)
    again = cache.get("k")
    assert isinstance(again, EngineProfile)
    assert again.compute_type == "int8" and again.cost == profile.cost
    (tmp_path / "engine" / "profiles.json").write_text("not json")
    assert cache.get("k") is None  # an unreadable cache means: measure again


def test_candidates_follow_the_device():
    # int8 is int8_float32 on CPU: timed once
    assert candidates("cpu", {"int8", "float32", "int8_float32", "float16"}) == ["int8", "float32"]
    assert candidates("cuda", {"float16", "int8_float16", "float32"}) == ["int8_float16", "float16"]


def test_a_load_burst_does_not_decide_the_choice():
    """Candidates take turns and are judged by their fastest call."""
    clock = FakeClock(0.0)

    class Bursty(FakeEngine):
        def __init__(self, cost: CostModel, burst_on: set[int]) -> None:
            super().__init__(clock, cost)
            self.burst_on = burst_on

        def run(self, n: int, max_len: int) -> None:
            super().run(n, max_len)
            if len(self.calls) in self.burst_on:
                clock.now += 1.0  # someone else had the CPU

    engines = {
        "int8": Bursty(CostModel(0.0, 0.0, 1e-4), {2}),  # fast, but hit once
        "float32": Bursty(CostModel(0.0, 0.0, 2e-4), set()),
    }
    choice = choose_compute_type(
        ["int8", "float32"], engines.__getitem__, shape=(10, 10), min_seconds=0.05, clock=clock
    )
    assert choice.compute_type == "int8"
    assert len(engines["int8"].calls) == len(engines["float32"].calls)  # turns
