"""Call-cost fitting, compute-type choice by measurement and the profile cache (fake
engines; the demo model where the translator reads and writes the cache)."""

from __future__ import annotations

import pytest

from pipeline.contract.pairs import Pair
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.costs import (
    FIT_TOLERANCE,
    MAX_CALIBRATION_ROUNDS,
    CostModel,
    Timing,
    calibrate,
    fit_cost_model,
)
from pipeline.engine.profile import (
    EngineProfile,
    ProfileCache,
    candidates,
    choose_compute_type,
    fitting_profile,
    measure_profile,
)
from pipeline.engine.translator import CTranslate2Translator
from pipeline.settings import load_settings
from tests.fakes import FakeClock

EN_XA = Pair.parse("en_en-XA")


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


def test_calibrate_times_every_shape_in_rounds_after_a_warm_up():
    clock = FakeClock(0.0)
    engine = FakeEngine(clock, CostModel(0.01, 0.001, 0.0002))
    shapes = [(1, 8), (4, 16), (8, 8)]
    calibration = calibrate(engine.run, shapes, clock=clock)
    # the warm-up, then two rounds of every shape: the fit explains them, so no more
    assert engine.calls == [(1, 8), *shapes, *shapes]
    assert [(t.n, t.max_len) for t in calibration.timings] == shapes
    assert calibration.rounds == 2 and calibration.fits
    assert calibration.cost.seconds(32, 40) == pytest.approx(engine.cost.seconds(32, 40))


# Timings of the demo model on a 2-core machine while other test suites ran (the
# largest shape took 4x its time): the absolute fit made of them had no per-call
# and no per-step cost, so one text per engine call was the cheapest plan.
TIMINGS_UNDER_LOAD = [
    Timing(1, 8, 0.000817),
    Timing(1, 24, 0.002476),
    Timing(8, 8, 0.002947),
    Timing(8, 24, 0.007818),
    Timing(24, 8, 0.007191),
    Timing(24, 16, 0.030137),
]


def test_a_fit_of_timings_taken_under_load_still_batches():
    fitted = fit_cost_model(TIMINGS_UNDER_LOAD)
    assert fitted.per_call_s + fitted.per_step_s > 0
    # 48 short texts of 9-11 tokens: a handful of calls, not one each
    plan = TokenBudgetBatcher(4096, cost=fitted).plan([9 + n % 3 for n in range(48)])
    assert len(plan.batches) <= 3


def test_calibration_runs_rounds_until_a_burst_of_load_is_gone():
    clock = FakeClock(0.0)
    truth = CostModel(0.0004, 0.00002, 0.000013)

    class Burst(FakeEngine):
        def run(self, n: int, max_len: int) -> None:
            super().run(n, max_len)
            # the largest shape's calls of the first three rounds run 4x slower
            if (n, max_len) == (24, 16) and len(self.calls) <= 1 + 3 * 6:
                clock.now += 3 * self.cost.seconds(n, max_len)

    engine = Burst(clock, truth)
    calibration = calibrate(engine.run, clock=clock)
    assert calibration.rounds == 4 and calibration.fits
    for n, max_len in [(1, 8), (32, 24), (64, 40)]:
        assert calibration.cost.seconds(n, max_len) == pytest.approx(truth.seconds(n, max_len))


def test_calibration_says_when_lasting_load_leaves_a_fit_that_does_not_explain_its_timings():
    clock = FakeClock(0.0)

    class Slow(FakeEngine):
        def run(self, n: int, max_len: int) -> None:
            super().run(n, max_len)
            if (n, max_len) == (8, 8):  # always slowed: no round brings it down
                clock.now += 2 * self.cost.seconds(n, max_len)

    calibration = calibrate(Slow(clock, CostModel(0.0004, 0.00002, 0.000013)).run, clock=clock)
    assert calibration.rounds == MAX_CALIBRATION_ROUNDS
    assert not calibration.fits and calibration.error > FIT_TOLERANCE
    with pytest.raises(ValueError):
        calibrate(FakeEngine(clock, CostModel(0, 0, 1e-4)).run, min_rounds=3, max_rounds=2)


def test_a_profile_whose_cost_model_does_not_explain_its_timings_does_not_fit():
    absolute_fit = CostModel(0.0, 0.0, 6.51e-05)  # what the old absolute fit made of them
    stale = EngineProfile("int8", absolute_fit, timings=TIMINGS_UNDER_LOAD)
    assert not stale.fits and stale.fit_error > FIT_TOLERANCE
    assert EngineProfile("int8", fit_cost_model(TIMINGS_UNDER_LOAD), timings=[]).fits


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


TRUTH = CostModel(per_call_s=0.004, per_step_s=0.002, per_token_s=0.0003)
SHAPES = [(1, 8), (1, 32), (8, 8), (16, 24)]


def measured(cost: CostModel, *, busy: bool = False) -> EngineProfile:
    """A profile of an engine costing ``TRUTH``, fitted as ``cost``; ``busy``: one call slowed."""
    timings = [Timing(n, m, TRUTH.seconds(n, m)) for n, m in SHAPES]
    if busy:
        timings[0] = Timing(1, 8, 5 * timings[0].seconds)
    return EngineProfile("int8", cost, timings=timings)


def stored(cache: ProfileCache, key: str) -> dict[str, object] | None:
    """The profile cached under ``key`` as the file holds it (timings rounded to the µs)."""
    profile = cache.get(key)
    return None if profile is None else profile.to_json()


class Measurements:
    """Hands out the given profiles one per measurement, counting the measurements."""

    def __init__(self, *profiles: EngineProfile) -> None:
        self.profiles = list(profiles)
        self.taken = 0

    def __call__(self) -> EngineProfile:
        self.taken += 1
        return self.profiles.pop(0)


def test_a_cached_profile_that_fits_is_used_without_measuring(tmp_path):
    cache = ProfileCache(tmp_path / "profiles.json")
    cache.put("k", measured(TRUTH))
    measure = Measurements()
    assert fitting_profile(cache, "k", measure, name="m").cost == TRUTH
    assert measure.taken == 0


def test_only_a_measurement_that_fits_is_kept_for_the_next_start(tmp_path):
    cache = ProfileCache(tmp_path / "profiles.json")
    stale = measured(CostModel(0.0, 0.0, 1.0))  # as an earlier release fitted it
    cache.put("k", stale)
    busy = measured(fit_cost_model(measured(TRUTH, busy=True).timings), busy=True)
    assert not stale.fits and not busy.fits
    measure = Measurements(busy, measured(TRUTH))

    # measured on a busy machine: used for this run, the cache left to measure again
    assert fitting_profile(cache, "k", measure, name="m") == busy
    assert stored(cache, "k") == stale.to_json()
    # the next start measures again; a fit is kept, and used from then on
    assert fitting_profile(cache, "k", measure, name="m").cost == TRUTH
    assert measure.taken == 2
    assert fitting_profile(cache, "k", Measurements(), name="m").cost == TRUTH


def test_a_cached_profile_that_does_not_fit_is_measured_again_on_the_demo_model(tmp_path):
    path = tmp_path / "profiles.json"
    engine = load_settings(engine={"profile_cache": str(path), "profile_seconds": 0.05}).engine
    translator = CTranslate2Translator.from_settings(engine, [EN_XA])
    first, key = translator.profile(EN_XA), translator.profile_key(EN_XA)
    assert first is not None
    # a profile as an earlier release cached it: its cost model far off the demo model's timings
    stale = EngineProfile(first.compute_type, CostModel(0.0, 0.0, 1.0), timings=first.timings)
    ProfileCache(path).put(key, stale)
    remeasured = CTranslate2Translator.from_settings(engine, [EN_XA]).profile(EN_XA)
    assert remeasured is not None and remeasured.timings != stale.timings
    assert remeasured.cost.per_token_s < 1.0
    # kept if it fits; measured on a busy machine, it is not, and the next start measures again
    kept = remeasured if remeasured.fits else stale
    assert stored(ProfileCache(path), key) == kept.to_json()
