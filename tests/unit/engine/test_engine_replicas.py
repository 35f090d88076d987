"""Replicas and call size on a GPU by measurement: the choice, the timing, the cache.

The choice is checked on the figures one H200 gave; the timing and the cache run
for real on the demo model on the CPU (no GPU here), as they run on ``cuda``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli.commands.worker import _with_call_size
from pipeline.engine.registry import Registry
from pipeline.engine.replicas import ReplicaPlan, SweepPoint, choose_plan, sweep
from pipeline.engine.translator import measured_replica_plan
from pipeline.settings import EngineSettings, load_settings

# sentences/s of the bench model on one H200 (float16): replicas x token budget
H200 = {
    (1, 4096): 888.0,
    (1, 16384): 1018.0,
    (2, 4096): 1456.0,
    (2, 16384): 1489.0,
    (3, 4096): 1606.0,
    (3, 16384): 1717.0,
    (4, 4096): 1705.0,
    (4, 16384): 1689.0,
}


def test_the_fewest_replicas_and_smallest_calls_within_five_percent_of_the_fastest() -> None:
    plan = choose_plan(sweep(lambda r, b: H200[(r, b)]))
    assert (plan.replicas, plan.token_budget, plan.max_messages) == (3, 16384, 256)
    assert len(plan.points) == len(H200)
    flat = choose_plan([SweepPoint(1, 4096, 100.0), SweepPoint(2, 4096, 104.0)])
    assert flat.replicas == 1, "a second copy of the model for 4 % is not worth its memory"
    assert ReplicaPlan.from_json(plan.to_json()) == plan
    with pytest.raises(ValueError, match="no measurement"):
        choose_plan([])


def test_a_plan_is_measured_once_per_model_and_machine(tmp_path: Path) -> None:
    engine = EngineSettings(profile_cache=tmp_path / "profiles.json", profile_seconds=0.2)
    entry = Registry.load(engine.registry).models_for()[0].any_entry()
    plan = measured_replica_plan(entry, "cpu", engine)
    assert {(p.replicas, p.token_budget) for p in plan.points} == {
        (r, b) for r in (1, 2, 3, 4) for b in (4096, 16384)
    }
    assert all(p.sentences_per_s > 0 for p in plan.points)
    assert plan == choose_plan(plan.points)
    before = (tmp_path / "profiles.json").read_text()
    assert measured_replica_plan(entry, "cpu", engine) == plan, "read back, not measured again"
    assert (tmp_path / "profiles.json").read_text() == before


def test_the_plans_call_size_applies_where_the_settings_leave_it_unset() -> None:
    plan = ReplicaPlan(3, 16384)
    chosen = _with_call_size(load_settings(), plan)
    assert (chosen.worker.token_budget, chosen.worker.max_messages) == (16384, 256)
    explicit = load_settings(worker={"token_budget": 2048})
    kept = _with_call_size(explicit, plan)
    assert (kept.worker.token_budget, kept.worker.max_messages) == (2048, 256)
