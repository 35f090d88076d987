"""``babelstream bench sla`` pieces that need neither Kafka nor Spark."""

from __future__ import annotations

import json

from pipeline.commands.bench_sla import bench_pair, report, synthetic_results
from pipeline.messages import TranslationResult
from pipeline.settings import Settings
from pipeline.sla import BatchStat, RunSummary


def test_synthetic_results_follow_the_contract() -> None:
    results = [TranslationResult.from_json(doc) for doc in synthetic_results(400, 4, rate=100)]
    assert len({r.request_id for r in results}) == 400
    assert {r.pair for r in results} == {"en_xaa", "en_xab", "en_xac", "en_xad"}
    assert results[-1].completed_at - results[0].completed_at == 3990, "100 per second"
    assert all(r.completed_at - r.submitted_at == r.latency_ms for r in results)
    assert {r.status for r in results} <= {"ok", "timeout", "error"}
    assert list(synthetic_results(5, 2, 10)) == list(synthetic_results(5, 2, 10)), "seeded"


def test_bench_pairs_are_valid_pair_ids() -> None:
    assert [bench_pair(i) for i in (0, 1, 26, 675)] == ["en_xaa", "en_xab", "en_xba", "en_xzz"]


def test_report_is_json_with_settings() -> None:
    summary = RunSummary((BatchStat(0, 900, 1000), BatchStat(1, 1100, 500)), windows=8,
                         wall_s=20.0)
    doc = report(Settings(), summary, {"results": 2000})
    assert doc["results_per_s"] == 1333 and doc["warm_results_per_s"] == 2200
    assert doc["input_batches"] == [[900, 1000], [1100, 500]]
    assert doc["settings"]["window_s"] == 5.0 and doc["settings"]["master"] == "local[2]"
    assert doc["results"] == 2000
    json.dumps(doc)
