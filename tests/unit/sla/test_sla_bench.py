"""``babelstream bench sla`` pieces that need neither Kafka nor Spark."""

from __future__ import annotations

import json

from pipeline.cli.commands.bench_sla import (
    bench_pair,
    combine_rounds,
    report,
    run_order,
    run_report,
    synthetic_results,
)
from pipeline.contract.messages import TranslationResult
from pipeline.settings import Settings
from pipeline.sla.logic import BatchStat, RunSummary


def test_synthetic_results_follow_the_contract() -> None:
    results = [TranslationResult.from_json(doc) for doc in synthetic_results(400, 4, rate=100)]
    assert len({r.request_id for r in results}) == 400
    assert {r.pair for r in results} == {"en_xaa", "en_xab", "en_xac", "en_xad"}
    assert results[-1].completed_at - results[0].completed_at == 3990, "100 per second"
    assert all(r.completed_at - r.submitted_at == r.latency_ms for r in results)
    assert {r.status for r in results} <= {"ok", "timeout", "error"}
    assert list(synthetic_results(5, 2, 10)) == list(synthetic_results(5, 2, 10)), "seeded"


def test_synthetic_duplicates_repeat_a_share_of_the_records() -> None:
    documents = list(synthetic_results(2000, 4, rate=100, duplicates=0.2))
    ids = [TranslationResult.from_json(doc).request_id for doc in documents]
    assert len(set(ids)) == 2000
    assert 300 < len(ids) - 2000 < 500
    repeated = [i for i in range(1, len(ids)) if ids[i] == ids[i - 1]]
    assert len(repeated) == len(ids) - 2000, "each copy right after its original"


def test_bench_pairs_are_valid_pair_ids() -> None:
    assert [bench_pair(i) for i in (0, 1, 26, 675)] == ["en_xaa", "en_xab", "en_xba", "en_xzz"]


def test_report_is_json_with_settings_and_the_ratio() -> None:
    settings = Settings()
    full = run_report(
        settings,
        RunSummary((BatchStat(0, 900, 1000), BatchStat(1, 1100, 500)), windows=8, wall_s=20.0),
        [],
    )
    baseline = run_report(
        settings,
        RunSummary((BatchStat(0, 1000, 500), BatchStat(1, 1000, 400)), windows=8, wall_s=15.0),
        [],
    )
    assert full["results_per_s"] == 1333 and full["warm_results_per_s"] == 2200
    assert full["input_batches"] == [[900, 1000], [1100, 500]]
    doc = report(settings, {"full": full, "baseline": baseline}, {"results": 2000})
    assert doc["full_vs_baseline_results_per_s"] == round(1333 / 2222, 3)
    assert doc["full_vs_baseline_warm_results_per_s"] == round(2200 / 2500, 3)
    assert doc["settings"]["window_s"] == 5.0 and doc["settings"]["master"] == "local[2]"
    assert doc["settings"]["state_store"] == "hdfs"
    assert doc["results"] == 2000
    json.dumps(doc)


def test_rounds_alternate_the_order_so_no_configuration_always_runs_first() -> None:
    order = run_order(["full", "baseline", "without_late"], 3)
    assert order == [
        (0, "full"),
        (0, "baseline"),
        (0, "without_late"),
        (1, "without_late"),
        (1, "baseline"),
        (1, "full"),
        (2, "full"),
        (2, "baseline"),
        (2, "without_late"),
    ]
    assert run_order(["full"], 2) == [(0, "full"), (1, "full")]


def test_rounds_combine_into_medians_and_keep_each_round() -> None:
    settings = Settings()
    rounds = [
        run_report(settings, RunSummary((BatchStat(0, 1000, ms), BatchStat(1, 1000, ms)), 8, w), [])
        for ms, w in ((1000, 10.0), (250, 30.0), (500, 20.0))
    ]
    combined = combine_rounds(rounds)
    assert combined["results_per_s"] == 2000 and combined["warm_results_per_s"] == 2000
    assert combined["wall_s"] == 20.0 and combined["busy_s"] == 1.0
    assert combined["rounds"] == rounds
    assert combined["windows"] == 8
    even = combine_rounds(rounds[:2])
    assert even["results_per_s"] == (1000 + 4000) // 2
