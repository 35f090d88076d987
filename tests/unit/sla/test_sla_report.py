"""``babelstream sla report``: windows merged from a Parquet history, without Spark.

The history here is written the way the job writes it (:func:`jobs.sla.write_parquet`
is not imported: it needs pyspark); the sketches come from the ``datasketches``
package, which shares Spark's KLL binary format (the integration test reads
sketches Spark wrote).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from datasketches import kll_doubles_sketch

from pipeline.cli.commands.sla import report_lines
from pipeline.cli.main import main
from pipeline.contract.messages import LateResult, SlaWindow
from pipeline.settings import InteractiveObjectives, SlaSettings
from pipeline.sla.history import HISTORY_SCHEMA, period_report, read_history, recent_windows
from pipeline.sla.logic import history_row

BASE = 1_700_000_000_000
K = 200


def _sketch(latencies: np.ndarray) -> bytes:
    sketch = kll_doubles_sketch(K)
    for value in latencies:
        sketch.update(float(value))
    return bytes(sketch.serialize())


def write_history(
    folder: Path,
    rng: np.random.Generator,
    windows: int,
) -> tuple[list[SlaWindow], np.ndarray]:
    """``windows`` 5 s windows of en_de with lognormal latencies; returns them and all latencies."""
    rows, written, everything = [], [], []
    for i in range(windows):
        latencies = rng.lognormal(5.0, 0.7, int(rng.integers(5, 40))).astype(int)
        timeouts = int((latencies > 400).sum())
        window = SlaWindow(
            pair="en_de",
            window_start=BASE + i * 5000,
            window_end=BASE + (i + 1) * 5000,
            count=len(latencies),
            p50_ms=float(np.median(latencies)),
            p95_ms=float(np.quantile(latencies, 0.95)),
            p99_ms=float(latencies.max()),
            timeout_ratio=timeouts / len(latencies),
            error_ratio=0.0,
            cache_hit_ratio=0.0,
            duplicates=i % 3,
            met={"p95_ms": bool(np.quantile(latencies, 0.95) <= 600)},
            objectives={"p95_ms": 600.0},
        )
        rows.append(history_row(window, _sketch(latencies)))
        written.append(window)
        everything.append(latencies)
    folder.mkdir(parents=True)
    for chunk in range(0, len(rows), 100):
        pq.write_table(
            pa.Table.from_pylist(rows[chunk : chunk + 100], schema=HISTORY_SCHEMA),
            folder / f"sla-{chunk:010d}-x.parquet",
        )
    return written, np.concatenate(everything)


def test_history_round_trip_and_version_1_rows(tmp_path: Path) -> None:
    written, _ = write_history(tmp_path / "h", np.random.default_rng(1), 3)
    old = {
        "schema_version": 1,
        "pair": "en_de",
        "window_start": BASE - 5000,
        "window_end": BASE,
        "count": 2,
        "p50_ms": 1.0,
        "p95_ms": 2.0,
        "p99_ms": 2.0,
        "timeout_ratio": 0.0,
        "error_ratio": 0.0,
        "cache_hit_ratio": 0.5,
    }
    pq.write_table(pa.Table.from_pylist([old]), tmp_path / "h" / "sla-old.parquet")
    read = {w.window_start: (w, sketch) for w, sketch in read_history(tmp_path / "h")}
    assert [read[w.window_start][0] for w in written] == written
    assert read[BASE - 5000] == (SlaWindow(**old), None), "v1 rows read with v2 defaults"
    assert [w.window_start for w in recent_windows(tmp_path / "h", 10_000)] == [
        BASE + 5000,
        BASE + 10_000,
    ]
    assert read_history(tmp_path / "missing") is not None
    assert list(read_history(tmp_path / "missing")) == []


def test_report_over_1000_windows_agrees_with_numpy(tmp_path: Path) -> None:
    written, latencies = write_history(tmp_path / "h", np.random.default_rng(7), 1000)
    late = [
        LateResult(
            request_id=f"l{i}",
            pair="en_de",
            priority="interactive",
            status="ok",
            latency_ms=5,
            completed_at=BASE + 1,
            window_start=BASE,
            window_end=BASE + 5000,
            watermark=BASE + 9000,
            late_by_ms=8999,
        ).model_dump()
        for i in range(4)
    ]
    (tmp_path / "late").mkdir()
    pq.write_table(pa.Table.from_pylist(late), tmp_path / "late" / "late-1.parquet")
    sla = SlaSettings(
        history_dir=tmp_path / "h",
        late_history_dir=tmp_path / "late",
        objectives=InteractiveObjectives(
            p95_ms=600, p99_ms=None, timeout_ratio=0.05, error_ratio=None
        ),
    )
    report = period_report(sla, "en_de", "interactive", BASE, BASE + 1000 * 5000)
    assert (report.windows, report.count) == (1000, len(latencies))
    assert report.rank_error == pytest.approx(
        kll_doubles_sketch.get_normalized_rank_error(K, False)
    )
    ordered = np.sort(latencies)
    for p, value in ((0.5, report.p50_ms), (0.95, report.p95_ms), (0.99, report.p99_ms)):
        low = np.quantile(ordered, max(p - report.rank_error, 0), method="inverted_cdf")
        high = np.quantile(ordered, min(p + report.rank_error, 1), method="inverted_cdf")
        assert low <= value <= high, (p, value, low, high)
    timeouts = sum(round(w.timeout_ratio * w.count) for w in written)
    assert report.timeout_ratio == timeouts / len(latencies)
    assert report.duplicates == sum(i % 3 for i in range(1000))
    assert report.late == 4
    assert report.met == {
        "p95_ms": report.p95_ms <= 600,
        "timeout_ratio": timeouts / len(latencies) <= 0.05,
    }
    assert report.windows_met["p95_ms"] == sum(w.met["p95_ms"] for w in written) / 1000
    half = period_report(sla, "en_de", "interactive", BASE, BASE + 500 * 5000 + 2500)
    assert half.windows == 500, "only windows wholly inside the period"
    none = period_report(sla, "de_en", "interactive", BASE, BASE + 5000)
    assert (none.windows, none.count, none.p95_ms, none.timeout_ratio) == (0, 0, None, None)


def test_report_command(tmp_path: Path) -> None:
    write_history(tmp_path / "h", np.random.default_rng(3), 20)
    args = [
        "sla",
        "report",
        "--pair",
        "en_de",
        "--from",
        str(BASE),
        "--to",
        "2023-11-14T22:15:00",
        "--history",
        str(tmp_path / "h"),
    ]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["windows"], doc["pair"], doc["priority"]) == (20, "en_de", "interactive")
    text = CliRunner().invoke(main, args)
    assert text.exit_code == 0 and "20 windows" in text.output and "P95" in text.output
    bad = CliRunner().invoke(
        main, ["sla", "report", "--pair", "en_de", "--from", "now", "--to", "now-1h"]
    )
    assert bad.exit_code == 2 and "--to must be after --from" in bad.output


def test_report_lines_say_what_is_missing(tmp_path: Path) -> None:
    sla = SlaSettings(history_dir=tmp_path / "none", late_history_dir=tmp_path / "none")
    lines = report_lines(period_report(sla, "en_de", "interactive", BASE, BASE + 1))
    assert lines[0].startswith("en_de interactive [2023-11-14T22:13:20+00:00")
    assert "P50 -  P95 -  P99 -" in lines[1]
    assert any(line.startswith("  objective p95_ms 1000: -") for line in lines)
