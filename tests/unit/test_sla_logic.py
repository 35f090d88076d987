"""Pure parts of the SLA job: durations, thresholds, schema, SlaWindow rows, batch log, idling."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pipeline.errors import ConfigError
from pipeline.messages import SlaWindow, TranslationResult
from pipeline.settings import PROJECT_ROOT
from pipeline.sla import (
    RESULT_FIELDS,
    BatchLog,
    BatchStat,
    ProgressTracker,
    RunSummary,
    checkpoint_batches,
    describe,
    parse_duration,
    parse_thresholds,
    result_schema_ddl,
    spark_interval,
    to_sla_window,
)

ROW: dict[str, Any] = {
    "pair": "en_de",
    "window_start": 1_700_000_000_000,
    "window_end": 1_700_000_005_000,
    "count": 40,
    "percentiles": [120, 480, 990],
    "timeout_ratio": 0.075,
    "error_ratio": 0.025,
    "cache_hit_ratio": 0.5,
}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5s", 5.0), ("500ms", 0.5), ("1.5m", 90.0), ("2h", 7200.0), ("30", 30.0), (" 10 s ", 10.0),
     ("0s", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "5 sec", "-5s", "5d", "1e3s", "five"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "interval"),
    [(5.0, "5000 milliseconds"), (0.25, "250 milliseconds"), (0.0, "0 milliseconds"),
     (90.0, "90000 milliseconds")],
)
def test_spark_interval(seconds: float, interval: str) -> None:
    assert spark_interval(seconds) == interval


@pytest.mark.parametrize("seconds", [0.0001, -1.0])
def test_spark_interval_rejects_below_a_millisecond(seconds: float) -> None:
    with pytest.raises(ConfigError):
        spark_interval(seconds)


def test_parse_thresholds() -> None:
    assert parse_thresholds(["en_de=3000", "en_en-XA = 250", "en_de=4000"]) == {
        "en_de": 4000, "en_en-XA": 250,
    }
    assert parse_thresholds([]) == {}


@pytest.mark.parametrize("item", ["en_de", "en_de=", "en_de=3s", "en_de=-1", "ende=300", "=300"])
def test_parse_thresholds_rejects(item: str) -> None:
    with pytest.raises(ConfigError):
        parse_thresholds([item])


def _python_type(annotation: Any) -> type:
    """``str`` for ``str``, ``Literal["a", "b"]`` and ``Literal[...] | None``; ``int`` alike."""
    options = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is not typing.Literal and options:
        (annotation,) = options
    if typing.get_origin(annotation) is typing.Literal:
        return type(typing.get_args(annotation)[0])
    return annotation


def test_result_fields_match_translation_result() -> None:
    """The job's explicit schema is a subset of the contract, with matching types."""
    spark_types = {int: "BIGINT", str: "STRING"}
    fields = TranslationResult.model_fields
    assert {name: spark_types[_python_type(fields[name].annotation)] for name in RESULT_FIELDS} \
        == RESULT_FIELDS
    assert {"pair", "status", "completed_at", "latency_ms"} <= {
        name for name, info in fields.items() if info.is_required()}
    assert result_schema_ddl().startswith("pair STRING, status STRING, ")


def test_to_sla_window_matches_the_json_schema() -> None:
    window = to_sla_window(ROW)
    assert window == SlaWindow(pair="en_de", window_start=1_700_000_000_000,
                               window_end=1_700_000_005_000, count=40, p50_ms=120.0,
                               p95_ms=480.0, p99_ms=990.0, timeout_ratio=0.075,
                               error_ratio=0.025, cache_hit_ratio=0.5)
    document = json.loads(window.to_json())
    schema = json.loads((PROJECT_ROOT / "schemas" / "sla_window.v1.schema.json").read_text())
    jsonschema.validate(document, schema)
    assert isinstance(document["p50_ms"], float)
    assert SlaWindow.from_json(window.to_json()) == window


def test_to_sla_window_rejects_a_ratio_above_one() -> None:
    with pytest.raises(ValueError, match="timeout_ratio"):
        to_sla_window({**ROW, "timeout_ratio": 1.5})


def test_describe() -> None:
    line = describe(to_sla_window(ROW))
    assert line.startswith("en_de        [2023-11-14 22:13:20.000, 2023-11-14 22:13:25.000) n=40")
    assert "p95=480ms" in line and "timeout=0.075" in line and "cache_hit=0.500" in line


def test_batch_log(tmp_path: Path) -> None:
    batch_log = BatchLog(tmp_path / "sinks" / "kafka")
    assert batch_log.last() is None and not batch_log.done(0)
    batch_log.mark(3)
    assert batch_log.last() == 3
    assert batch_log.done(2) and batch_log.done(3) and not batch_log.done(4)
    assert BatchLog(tmp_path / "sinks" / "kafka").done(3), "survives a restart"
    assert [p.name for p in (tmp_path / "sinks").iterdir()] == ["kafka"]


def test_checkpoint_batches(tmp_path: Path) -> None:
    assert checkpoint_batches(tmp_path) == (-1, -1)
    for folder, ids in (("offsets", (0, 1, 2, 10)), ("commits", (0, 1, 2))):
        (tmp_path / folder).mkdir()
        for batch_id in ids:
            (tmp_path / folder / str(batch_id)).write_text("v1")
            (tmp_path / folder / f".{batch_id}.crc").write_text("")
    (tmp_path / "offsets" / "11.tmp").write_text("")
    assert checkpoint_batches(tmp_path) == (10, 2)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _report(batch: int, rows: int, ms: int = 200, ts: str = "t") -> dict[str, Any]:
    return {"batchId": batch, "timestamp": f"{ts}{batch}", "numInputRows": rows,
            "durationMs": {"triggerExecution": ms}}


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
    clock = FakeClock()
    tracker = ProgressTracker(idle_s=5.0, clock=clock)
    clock.now += 4.9
    assert not tracker.idle()
    tracker.observe([_report(0, 10)])
    clock.now += 4.9
    tracker.observe([_report(1, 0)])
    assert not tracker.idle(), "batches without input do not reset the clock, nor trip it"
    clock.now += 0.1
    assert tracker.idle()


def test_run_summary_rates() -> None:
    summary = RunSummary((BatchStat(0, 1000, 2000), BatchStat(1, 3000, 1000),
                          BatchStat(2, 1000, 1000)), windows=4, wall_s=9.0)
    assert (summary.input_rows, summary.busy_s) == (5000, 4.0)
    assert summary.rows_per_busy_s == 1250.0
    assert summary.warm_rows_per_busy_s == 2000.0
    empty = RunSummary((), windows=0, wall_s=1.0)
    assert empty.rows_per_busy_s == empty.warm_rows_per_busy_s == 0.0
