"""Pure parts of the SLA job: durations, thresholds, schema, SlaWindow rows (objectives, burn
rates), late rows, batch log, idling."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pipeline.contract.messages import LateResult, SlaWindow, Tick, TranslationResult
from pipeline.errors import ConfigError
from pipeline.settings import (
    PROJECT_ROOT,
    BulkObjectives,
    InteractiveObjectives,
    SlaSettings,
    SloObjectives,
)
from pipeline.sla.logic import (
    RESULT_FIELDS,
    TICK_FIELDS,
    BatchLog,
    BatchStat,
    BurnRates,
    ProgressTracker,
    RunSummary,
    WindowFigures,
    checkpoint_batches,
    describe,
    late_watermark,
    objectives_met,
    parse_thresholds,
    result_schema_ddl,
    sink_transactional_id,
    spark_interval,
    to_late_result,
    to_sla_window,
    topic_rows,
)
from tests.fakes import FakeClock

ROW: dict[str, Any] = {
    "series": "en_de",
    "priority": "interactive",
    "window_start": 1_700_000_000_000,
    "window_end": 1_700_000_005_000,
    "count": 40,
    "received": 43,
    "percentiles": [120, 480, 990],
    "timeouts": 3,
    "errors": 1,
    "cache_hits": 20,
    "cancelled": 2,
    "rejected": 0,
    "sketch": bytearray(b"kll"),
}
SLA = SlaSettings(
    objectives=InteractiveObjectives(p95_ms=500, p99_ms=900, timeout_ratio=0.05, error_ratio=None)
)


@pytest.mark.parametrize(
    ("seconds", "interval"),
    [
        (5.0, "5000 milliseconds"),
        (0.25, "250 milliseconds"),
        (0.0, "0 milliseconds"),
        (90.0, "90000 milliseconds"),
    ],
)
def test_spark_interval(seconds: float, interval: str) -> None:
    assert spark_interval(seconds) == interval


@pytest.mark.parametrize("seconds", [0.0001, -1.0])
def test_spark_interval_rejects_below_a_millisecond(seconds: float) -> None:
    with pytest.raises(ConfigError):
        spark_interval(seconds)


def test_parse_thresholds() -> None:
    assert parse_thresholds(["en_de=3000", "en_en-XA = 250", "en_de=4000"]) == {
        "en_de": 4000,
        "en_en-XA": 250,
    }
    assert parse_thresholds([]) == {}


@pytest.mark.parametrize("item", ["en_de", "en_de=", "en_de=3s", "en_de=-1", "ende=300", "=300"])
def test_parse_thresholds_rejects(item: str) -> None:
    with pytest.raises(ConfigError):
        parse_thresholds([item])


def _python_type(annotation: Any) -> type:
    """``str`` for ``str``, ``Literal["a", "b"]``, ``Annotated[str, ...] | None``; ``int`` alike."""
    options = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is not typing.Literal and options:
        (annotation,) = options
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is typing.Literal:
        return type(typing.get_args(annotation)[0])
    return annotation


@pytest.mark.parametrize(
    ("fields", "model"), [(RESULT_FIELDS, TranslationResult), (TICK_FIELDS, Tick)]
)
def test_parsed_fields_match_the_contract(fields: dict[str, str], model: type) -> None:
    """The job's explicit schemas are subsets of the contract, with matching types."""
    spark_types = {int: "BIGINT", str: "STRING"}
    declared = model.model_fields
    assert {name: spark_types[_python_type(declared[name].annotation)] for name in fields} == fields
    assert result_schema_ddl().startswith("request_id STRING, pair STRING, status STRING, ")


def _window(
    row: dict[str, Any] | None = None, sla: SlaSettings = SLA, burn: BurnRates | None = None
) -> SlaWindow:
    return to_sla_window(WindowFigures.from_row(row or ROW), sla, burn or BurnRates())


def test_to_sla_window_matches_the_json_schema() -> None:
    window = _window()
    assert window == SlaWindow(
        pair="en_de",
        priority="interactive",
        window_start=1_700_000_000_000,
        window_end=1_700_000_005_000,
        count=40,
        p50_ms=120.0,
        p95_ms=480.0,
        p99_ms=990.0,
        timeout_ratio=0.075,
        error_ratio=0.025,
        cache_hit_ratio=0.5,
        cancel_ratio=0.05,
        rejected_ratio=0.0,
        duplicates=3,
        objectives={"p95_ms": 500.0, "p99_ms": 900.0, "timeout_ratio": 0.05},
        met={"p95_ms": True, "p99_ms": False, "timeout_ratio": False},
        burn_rate_1h=0.075 / 0.05,
        burn_rate_6h=0.075 / 0.05,
    )
    document = json.loads(window.to_json())
    schema = json.loads((PROJECT_ROOT / "schemas" / "sla_window.v2.schema.json").read_text())
    jsonschema.validate(document, schema)
    assert isinstance(document["p50_ms"], float)
    assert SlaWindow.from_json(window.to_json()) == window
    assert WindowFigures.from_row(ROW).sketch == b"kll"


def test_bulk_windows_are_held_to_bulk_objectives() -> None:
    sla = SlaSettings(
        bulk_objectives=BulkObjectives(timeout_ratio=0.1, min_throughput_per_s=10, error_ratio=None)
    )
    window = _window({**ROW, "priority": "bulk"}, sla)
    assert window.objectives == {"timeout_ratio": 0.1, "min_throughput_per_s": 10.0}
    # 40 results in 5 s = 8/s, under the 10/s objective
    assert window.met == {"timeout_ratio": True, "min_throughput_per_s": False}
    assert window.burn_rate_1h == pytest.approx(0.75)


def test_pair_objectives_override_the_defaults() -> None:
    sla = SlaSettings(
        objectives=InteractiveObjectives(
            p95_ms=100, timeout_ratio=0.5, p99_ms=None, error_ratio=None
        ),
        pair_objectives={"en_de": SloObjectives(p95_ms=600)},
    )
    assert sla.objectives_for("en_de", "interactive").targets() == {
        "p95_ms": 600.0,
        "timeout_ratio": 0.5,
    }
    assert sla.objectives_for("de_en", "interactive").targets() == {
        "p95_ms": 100.0,
        "timeout_ratio": 0.5,
    }
    assert _window(sla=sla).met == {"p95_ms": True, "timeout_ratio": True}


def test_without_a_timeout_objective_there_is_no_burn_rate() -> None:
    window = _window(
        sla=SlaSettings(
            objectives=InteractiveObjectives(
                p95_ms=None, p99_ms=2000, timeout_ratio=None, error_ratio=None
            )
        )
    )
    assert (window.burn_rate_1h, window.burn_rate_6h) == (None, None)
    assert window.met == {"p99_ms": True}


def test_objectives_met_at_the_boundary() -> None:
    window = _window()
    assert objectives_met(SloObjectives(p95_ms=480, timeout_ratio=0.075), window) == {
        "p95_ms": True,
        "timeout_ratio": True,
    }
    assert objectives_met(SloObjectives(error_ratio=0.02, min_throughput_per_s=8), window) == {
        "error_ratio": False,
        "min_throughput_per_s": True,
    }


def test_burn_rates_by_hand() -> None:
    """Windows every 30 min: the 1 h period holds the window and the one before, 6 h all."""
    burn = BurnRates(horizons_ms=(3_600_000, 21_600_000))
    half_hour = 1_800_000
    figures = [(100, 1), (200, 0), (50, 5), (100, 2)]  # (count, timeouts)
    for i, (count, timeouts) in enumerate(figures):
        burn.add("en_de", "interactive", i * half_hour, count, timeouts)
    end = 3 * half_hour
    # 1 h: windows ending at 1.0 h and 1.5 h (the one at 0.5 h is exactly 1 h before: out)
    assert burn.rates("en_de", "interactive", end, 0.01) == pytest.approx(
        ((5 + 2) / (50 + 100) / 0.01, (1 + 0 + 5 + 2) / (100 + 200 + 50 + 100) / 0.01)
    )
    assert burn.rates("en_de", "bulk", end, 0.01) == (None, None)
    burn.add("en_de", "interactive", end, 100, 7)  # a re-run batch replaces the window
    assert burn.rates("en_de", "interactive", end, 0.01)[0] == pytest.approx(12 / 150 / 0.01)


def test_burn_rates_forget_windows_beyond_the_longest_horizon() -> None:
    burn = BurnRates(horizons_ms=(10, 20))
    burn.add("p_q", "interactive", 0, 10, 10)
    burn.add("p_q", "interactive", 30, 10, 0)
    assert burn.rates("p_q", "interactive", 30, 1.0) == (0.0, 0.0)
    burn.add("p_q", "interactive", 0, 10, 10)  # put back, then pruned again by a newer one
    burn.add("p_q", "interactive", 31, 10, 0)
    assert burn.rates("p_q", "interactive", 40, 1.0) == (0.0, 0.0)


def test_to_sla_window_rejects_more_timeouts_than_results() -> None:
    with pytest.raises(ValueError, match="timeout_ratio"):
        _window({**ROW, "timeouts": 60})


def test_describe() -> None:
    line = describe(_window())
    assert line.startswith(
        "en_de        inte [2023-11-14 22:13:20.000, 2023-11-14 22:13:25.000) n=40"
    )
    assert "p95=480ms" in line and "timeout=0.075" in line and "cache_hit=0.500" in line
    assert line.endswith("dup=3 burn1h=1.50 missed=p99_ms,timeout_ratio")


def test_late_result_and_watermark() -> None:
    row = {
        "request_id": "r-9",
        "series": "unsupported",
        "priority": "interactive",
        "status": "error",
        "latency_ms": 12,
        "completed_at": 1_700_000_001_000,
        "window_start": 1_700_000_000_000,
        "window_end": 1_700_000_005_000,
    }
    late = to_late_result(row, 1_700_000_007_500)
    assert late == LateResult(
        request_id="r-9",
        pair="unsupported",
        priority="interactive",
        status="error",
        latency_ms=12,
        completed_at=1_700_000_001_000,
        window_start=1_700_000_000_000,
        window_end=1_700_000_005_000,
        watermark=1_700_000_007_500,
        late_by_ms=6500,
    )


def _offsets(folder: Path, batch_id: int, watermark: int, ends: dict[str, dict[str, int]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": watermark, "batchTimestampMs": 1, "conf": {}}
    (folder / str(batch_id)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(ends)}")


def test_late_watermark_is_the_previous_batchs(tmp_path: Path) -> None:
    offsets = tmp_path / "offsets"
    _offsets(offsets, 0, 0, {"res": {"0": 10}})
    _offsets(offsets, 1, 500, {"res": {"0": 25}})
    _offsets(offsets, 2, 900, {"res": {"0": 30}})
    # the first batch drops nothing; batch N drops its input by batch N-1's watermark
    assert [late_watermark(tmp_path, n) for n in (0, 1, 2)] == [0, 0, 500]
    (offsets / "3").write_text("v1\n")  # being written: batch 3 still reads batch 2's
    assert late_watermark(tmp_path, 3) == 900


def test_batch_log(tmp_path: Path) -> None:
    batch_log = BatchLog(tmp_path / "sinks" / "parquet")
    assert batch_log.last() is None and not batch_log.done(0)
    batch_log.mark(3)
    assert batch_log.last() == 3
    assert batch_log.done(2) and batch_log.done(3) and not batch_log.done(4)
    assert BatchLog(tmp_path / "sinks" / "parquet").done(3), "survives a restart"
    assert [p.name for p in (tmp_path / "sinks").iterdir()] == ["parquet"]


def test_sink_transactional_id_is_one_per_checkpoint(tmp_path: Path) -> None:
    """A restarted job must reuse its id (to fence its predecessor); other checkpoints differ."""
    first = SlaSettings(checkpoint_dir=tmp_path / "a")
    again = SlaSettings(checkpoint_dir=tmp_path / "x" / ".." / "a")
    other = SlaSettings(checkpoint_dir=tmp_path / "b")
    assert sink_transactional_id(first) == sink_transactional_id(again)
    assert sink_transactional_id(first) != sink_transactional_id(other)
    assert sink_transactional_id(first).startswith("babelstream-sla-")
    named = SlaSettings(checkpoint_dir=tmp_path / "a", transactional_id="sla-eu-1")
    assert sink_transactional_id(named) == "sla-eu-1"


def test_checkpoint_batches(tmp_path: Path) -> None:
    assert checkpoint_batches(tmp_path) == (-1, -1)
    for folder, ids in (("offsets", (0, 1, 2, 10)), ("commits", (0, 1, 2))):
        (tmp_path / folder).mkdir()
        for batch_id in ids:
            (tmp_path / folder / str(batch_id)).write_text("v1")
            (tmp_path / folder / f".{batch_id}.crc").write_text("")
    (tmp_path / "offsets" / "11.tmp").write_text("")
    assert checkpoint_batches(tmp_path) == (10, 2)


def _report(batch: int, rows: int, ms: int = 200, ts: str = "t") -> dict[str, Any]:
    return {
        "batchId": batch,
        "timestamp": f"{ts}{batch}",
        "numInputRows": rows,
        "durationMs": {"triggerExecution": ms},
    }


def test_progress_tracker_counts_each_report_once() -> None:
    tracker = ProgressTracker()
    first = [_report(0, 100), _report(1, 0)]
    assert tracker.observe(first) == first
    assert tracker.observe([*first, _report(2, 50, ms=300)]) == [_report(2, 50, ms=300)]
    # an idle report reuses the next batch id with a new timestamp
    tracker.observe([_report(3, 0, ts="idle")])
    assert tracker.input_batches == [BatchStat(0, 100, 200), BatchStat(2, 50, 300)]
    assert not tracker.idle(), "no idle limit: never idle"


def test_progress_tracker_reports_input_rows_once() -> None:
    seen: list[int] = []
    tracker = ProgressTracker(on_input=seen.append)
    tracker.observe([_report(0, 100), _report(1, 0)])
    tracker.observe([_report(0, 100), _report(2, 50)])
    assert seen == [100, 50]


def test_progress_tracker_idles_after_the_last_input() -> None:
    clock = FakeClock(100.0)
    tracker = ProgressTracker(idle_s=5.0, clock=clock)
    clock.now += 60
    assert not tracker.idle(), "a query that has not reported yet is still starting"
    tracker.observe([_report(0, 10)])
    clock.now += 60
    assert not tracker.idle(), "the next batch may be running: a long one is not idleness"
    tracker.observe([_report(1, 5)])
    clock.now += 4.9
    tracker.observe([_report(2, 0)])
    assert not tracker.idle(), "batches without input do not reset the clock, nor trip it"
    clock.now += 0.1
    assert tracker.idle()


def _kafka_offsets(results: int, ticks: int) -> dict[str, dict[str, int]]:
    return {"translate.results": {"0": results, "1": 0}, "translate.ticks": {"0": ticks}}


def _source_report(
    batch: int, results: tuple[int, int] | None, ticks: tuple[int, int]
) -> dict[str, Any]:
    """A report of one Kafka source over results and ticks: each (start, end) offset of
    partition 0 (results None: the first batch, which has no start offsets)."""
    start = None if results is None else _kafka_offsets(results[0], ticks[0])
    end = _kafka_offsets(results[1] if results else 7, ticks[1])
    rows = (results[1] - results[0] if results else 7) + ticks[1] - ticks[0]
    source = {"startOffset": start, "endOffset": end, "numInputRows": rows}
    return {**_report(batch, rows), "sources": [source]}


def test_results_on_their_topic_count_once_ticks_do_not() -> None:
    assert topic_rows(_source_report(1, (7, 10), (4, 6)), "translate.results") == 3
    assert topic_rows(_source_report(1, (7, 7), (4, 6)), "translate.results") == 0
    # Spark's JSON as text, as some Spark versions give the offsets
    as_text = _source_report(1, (7, 9), (4, 6))
    as_text["sources"][0] = {
        k: json.dumps(v) if k.endswith("Offset") else v for k, v in as_text["sources"][0].items()
    }
    assert topic_rows(as_text, "translate.results") == 2
    # a first batch (no start offsets) counts from offset 0, at most its input rows
    assert topic_rows(_source_report(0, None, (0, 6)), "translate.results") == 7
    assert topic_rows(_report(3, 5), "translate.results") is None, "no sources, no answer"


def test_ticks_alone_never_keep_the_job_from_idling() -> None:
    """A worker's ticks arrive in every batch; only results count as activity."""
    clock = FakeClock(100.0)
    tracker = ProgressTracker(idle_s=5.0, clock=clock, activity_topic="translate.results")
    tracker.observe([_source_report(0, None, (0, 0))])
    for batch, offset in enumerate(range(2, 14, 2), start=1):
        clock.now += 1.0
        tracker.observe([_source_report(batch, (7, 7), (offset, offset + 2))])
    assert tracker.idle(), "six seconds of ticks and no result: idle"
    assert [b.rows for b in tracker.input_batches] == [7, 2, 2, 2, 2, 2, 2]
    assert tracker.results == 7
    tracker.observe([_source_report(7, (7, 8), (14, 16))])
    assert not tracker.idle(), "a result is activity"
    assert tracker.results == 8


def test_run_summary_rates() -> None:
    summary = RunSummary(
        (BatchStat(0, 1000, 2000), BatchStat(1, 3000, 1000), BatchStat(2, 1000, 1000)),
        windows=4,
        wall_s=9.0,
    )
    assert (summary.input_rows, summary.busy_s) == (5000, 4.0)
    assert summary.rows_per_busy_s == 1250.0
    assert summary.warm_rows_per_busy_s == 2000.0
    empty = RunSummary((), windows=0, wall_s=1.0)
    assert empty.rows_per_busy_s == empty.warm_rows_per_busy_s == 0.0
