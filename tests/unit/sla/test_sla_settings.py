"""SLA settings and the ``babelstream sla`` options, checked without starting Spark."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from pipeline.cli.commands.sla import DURATION, sla_settings, summary_line
from pipeline.cli.main import main
from pipeline.settings import Settings, SlaSettings
from pipeline.sla.logic import BatchStat, RunSummary


def test_defaults() -> None:
    sla = Settings().sla
    assert (sla.source_topic, sla.sink_topic) == ("translate.results", "translate.sla")
    assert (sla.window_s, sla.slide_s, sla.watermark_s) == (5.0, None, 30.0)
    assert sla.threshold_ms("en_de") == 5000
    assert sla.sinks == ("kafka", "parquet", "console")
    assert sla.master == "local[2]" and sla.shuffle_partitions == 1


def test_thresholds_per_pair() -> None:
    sla = SlaSettings(thresholds_ms={"en_de": 800}, default_threshold_ms=2000)
    assert sla.threshold_ms("en_de") == 800
    assert sla.threshold_ms("de_en") == 2000


@pytest.mark.parametrize(
    "fields",
    [
        {"thresholds_ms": {"ende": 5}},
        {"thresholds_ms": {"en_de": -1}},
        {"window_s": 5, "slide_s": 10},
        {"window_s": 0},
        {"sinks": ("kafka", "stdout")},
        {"starting_offsets": "newest"},
        {"sinks": ()},
        {"pair_objectives": {"ende": {"p95_ms": 5}}},
        {"objectives": {"timeout_ratio": 0}},
        {"objectives": {"p95": 5}},
        {"sketch_k": 4},
        {"state_store": "memory"},
    ],
)
def test_invalid_settings(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SlaSettings(**fields)


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_SLA__THRESHOLDS_MS", '{"en_de": 1500}')
    monkeypatch.setenv("BABELSTREAM_SLA__WINDOW_S", "10")
    sla = Settings().sla
    assert sla.threshold_ms("en_de") == 1500 and sla.window_s == 10.0


def test_overrides_keep_what_was_not_given() -> None:
    base = SlaSettings(thresholds_ms={"en_de": 800, "de_en": 900}, watermark_s=12.0)
    sla = sla_settings(
        base, {"window_s": 10.0, "slide_s": None, "sinks": ("kafka",)}, ("de_en=300", "fr_de=100")
    )
    assert (sla.window_s, sla.slide_s, sla.watermark_s, sla.sinks) == (10.0, None, 12.0, ("kafka",))
    assert sla.thresholds_ms == {"en_de": 800, "de_en": 300, "fr_de": 100}


def test_duration_option() -> None:
    assert DURATION.convert("250ms", None, None) == 0.25
    assert DURATION.convert(2.0, None, None) == 2.0


def test_summary_line() -> None:
    batches = (BatchStat(0, 1000, 900), BatchStat(2, 200, 100))
    line = summary_line(RunSummary(batches, windows=8, wall_s=12.34, late_rows=3, results=1190))
    assert line == (
        "sla: 1190 results and 10 ticks in 2 batches, 8 windows emitted, 3 late rows, 12.3s"
    )
    untold = summary_line(RunSummary(batches, windows=8, wall_s=12.34, late_rows=3))
    assert untold.startswith("sla: 1200 records in 2 batches")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "5s", "--slide", "10s"], "must not exceed window"),
        (["--threshold", "en_de"], "expected PAIR=MS"),
        (["--sinks", "kafka,stdout"], "sinks"),
        (["--watermark", "soon"], "'soon' is not a duration"),
    ],
)
def test_bad_options_fail_before_spark_starts(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # whatever ran before in this session (an integration test uses the job's sink)
    monkeypatch.delitem(sys.modules, "jobs.sla", raising=False)
    result = CliRunner().invoke(main, ["sla", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "jobs.sla" not in sys.modules, "the job (and pyspark) load only to run"


def test_registered_commands() -> None:
    runner = CliRunner()
    assert "sla" in runner.invoke(main, ["--help"]).output
    assert "sla" in runner.invoke(main, ["bench", "--help"]).output
    assert "report" in runner.invoke(main, ["sla", "--help"]).output
    spark = runner.invoke(main, ["spark", "--help"])
    assert spark.exit_code == 0 and "up" in spark.output and "down" in spark.output


def test_new_defaults_keep_the_driver_on_loopback_and_dedup_on() -> None:
    sla = Settings().sla
    assert sla.driver_host == "127.0.0.1"
    assert (sla.dedup, sla.sketch_k, sla.state_store) == (True, 200, "hdfs")
    assert (sla.ticks_topic, sla.late_topic) == ("translate.ticks", "translate.sla.late")
    assert sla.objectives_for("en_de", "bulk") == sla.bulk_objectives
    assert Settings().worker.tick_interval_s > 0


def test_objectives_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_SLA__PAIR_OBJECTIVES", '{"en_de": {"p99_ms": 800}}')
    monkeypatch.setenv("BABELSTREAM_SLA__OBJECTIVES__TIMEOUT_RATIO", "0.02")
    sla = Settings().sla
    assert sla.objectives_for("en_de", "interactive").targets() == {
        "p95_ms": 1000.0,
        "p99_ms": 800.0,
        "timeout_ratio": 0.02,
        "error_ratio": 0.01,
    }
