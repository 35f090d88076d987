"""BatchShaper: static or adaptive knobs per pair; bulk calls bounded in time."""

from __future__ import annotations

import logging

import pytest

from pipeline.contract.messages import SlaWindow
from pipeline.contract.pairs import Pair
from pipeline.engine.adaptive import THROUGHPUT
from pipeline.engine.costs import CostModel
from pipeline.engine.shaping import BatchShaper
from pipeline.settings import load_settings

MODEL = "opus-mt-en-de"
PAIR = Pair("en", "de")


def SERVES(pair: Pair) -> bool:
    """The model serves en_de alone."""
    return pair == PAIR


COST = CostModel(per_call_s=0.005, per_step_s=0.002, per_token_s=0.00025)


def _settings(**batching: object):
    s = load_settings()
    return s.model_copy(update={"batching": s.batching.model_copy(update=batching)})


def _window(pair: str, p95: float) -> SlaWindow:
    return SlaWindow(
        pair=pair,
        window_start=0,
        window_end=5000,
        count=100,
        p50_ms=p95 / 2,
        p95_ms=p95,
        p99_ms=p95,
        timeout_ratio=0,
        error_ratio=0,
        cache_hit_ratio=0,
    )


def test_static_interactive_and_bulk_knobs():
    s = _settings()
    interactive = BatchShaper(s, MODEL, SERVES, COST, bulk=False)
    bulk = BatchShaper(s, MODEL, SERVES, COST, bulk=True)
    assert interactive.controller is None
    assert interactive.knobs.max_messages == s.worker.max_messages
    assert bulk.knobs.max_messages == s.worker.bulk_max_messages
    assert interactive.batcher().max_call_s is None
    assert bulk.batcher().max_call_s == s.batching.bulk_max_call_s


def test_bulk_calls_stay_within_the_time_bound():
    shaper = BatchShaper(_settings(bulk_max_call_s=0.1), MODEL, SERVES, COST, bulk=True)
    plan = shaper.batcher().plan([30] * 16)
    # 4 texts of 30 tokens: 5 + 60 + 30 ms; a fifth would pass 100 ms
    assert [len(b) for b in plan.batches] == [4, 4, 4, 4]
    assert all(sub.estimated_s <= 0.1 for sub in plan.sub_batches)


def test_adaptive_interactive_follows_the_load_and_the_sla_windows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="pipeline.engine.shaping")
    shaper = BatchShaper(
        _settings(adaptive=True, p95_ms={"en_de": 400.0}), MODEL, SERVES, COST, bulk=False
    )
    assert shaper.controller is not None
    quiet = shaper.knobs
    for _ in range(4):  # full takes with requests queueing: a backlog
        shaper.observe(
            submitted_ms=[0, 10],
            started_ms=1500,
            taken=shaper.knobs.max_messages,
            service_s=0.3,
            lengths=[30, 40],
        )
    assert shaper.controller.state.mode == THROUGHPUT
    assert shaper.knobs.max_messages > quiet.max_messages
    # the switch is logged once, with what caused it
    (switch,) = [r.getMessage() for r in caplog.records]
    assert switch.startswith("opus-mt-en-de: batching latency -> throughput mode (queue ")
    assert switch.endswith(f"up to {shaper.knobs.max_messages} messages")
    share = shaper.controller.state.latency_share
    shaper.add(_window("en_fr", 5000))  # another pair's window: ignored
    assert shaper.controller.state.latency_share == share
    shaper.add(_window("en_de", 5000))
    assert shaper.controller.state.latency_share < share


def test_static_shaper_ignores_observations():
    shaper = BatchShaper(_settings(), MODEL, SERVES, COST, bulk=False)
    before = shaper.knobs
    shaper.observe(submitted_ms=[0], started_ms=10_000, taken=64, service_s=5, lengths=[10])
    shaper.add(_window("en_de", 10_000))
    assert shaper.knobs == before


def test_adaptive_shaper_hands_the_plans_estimate_to_the_controller():
    shaper = BatchShaper(_settings(adaptive=True), MODEL, SERVES, COST, bulk=False)
    assert shaper.controller is not None
    for _ in range(30):  # every call took twice what the planner expected
        shaper.observe(
            submitted_ms=[0],
            started_ms=5,
            taken=1,
            service_s=0.2,
            lengths=[30],
            estimated_s=0.1,
        )
    assert shaper.controller.state.cost_correction > 1.9
