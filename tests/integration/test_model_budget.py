"""Four models on a worker that may hold two: every request answered, by its own model,
with models swapped by backlog rather than batch by batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.pairs import measure_step, spread_registry
from pipeline.engine.registry import Registry
from pipeline.settings import PROJECT_ROOT, Settings, load_settings

pytestmark = pytest.mark.integration

MODELS = 4
BUDGET = 2


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


def test_models_under_a_budget_take_turns_by_backlog(settings: Settings, tmp_path: Path) -> None:
    demo = Registry.load(PROJECT_ROOT / "models" / "registry.toml").entries(["en_en-XA"])[0]
    registry = tmp_path / "fleet.toml"
    pairs = spread_registry(registry, demo, 2 * MODELS, models=MODELS, run="budget")
    texts = [f"Sentence number {i} of the budget test." for i in range(400)]
    step = measure_step(
        settings,
        "budget",
        registry,
        pairs,
        texts,
        env={
            "BABELSTREAM_ENGINE__MAX_LOADED_MODELS": str(BUDGET),
            # generous against a loaded machine: a model's next batch comes well within it
            "BABELSTREAM_ENGINE__SWAP_IDLE_S": "1.0",
        },
    )
    assert step.load.missing == 0 and step.load.statuses == {"ok": len(texts)}, step.load
    # all at once, every model with a backlog: each swapped in once (batch by batch
    # would be a load every few batches: the fleet step measured 24 in 600 requests)
    assert step.model_loads <= MODELS + 2, step
