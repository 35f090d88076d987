"""The SLA job's Parquet history, read back: windows, late rows, and reports over any period.

Percentiles cannot be averaged across windows, so each history row keeps the
window's latency distribution as a KLL sketch (Apache DataSketches'
``KllDoublesSketch``, written by Spark's ``kll_sketch_agg_double`` and read
here by the ``datasketches`` package: the two share one binary format).
Sketches merge without losing their guarantee: the merged sketch answers a
quantile of the whole period with a normalized rank error of at most
``kll_doubles_sketch.get_normalized_rank_error(k, False)`` (99% confidence;
1.33% at k = 200), i.e. the value reported for p has a rank between p − ε and
p + ε among the period's latencies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from pipeline.contract.messages import SlaWindow
from pipeline.settings import SlaSettings

HISTORY_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int64()),
        ("pair", pa.string()),
        ("priority", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("count", pa.int64()),
        ("p50_ms", pa.float64()),
        ("p95_ms", pa.float64()),
        ("p99_ms", pa.float64()),
        ("timeout_ratio", pa.float64()),
        ("error_ratio", pa.float64()),
        ("cache_hit_ratio", pa.float64()),
        ("cancel_ratio", pa.float64()),
        ("rejected_ratio", pa.float64()),
        ("duplicates", pa.int64()),
        ("objectives", pa.map_(pa.string(), pa.float64())),
        ("met", pa.map_(pa.string(), pa.bool_())),
        ("burn_rate_1h", pa.float64()),
        ("burn_rate_6h", pa.float64()),
        ("latency_sketch", pa.binary()),
    ]
)
PERIOD_QUANTILES = {"p50_ms": 0.5, "p95_ms": 0.95, "p99_ms": 0.99}


def _dataset(folder: Path, schema: pa.Schema | None = None) -> ds.Dataset | None:
    files = sorted(str(path) for path in folder.glob("*.parquet")) if folder.is_dir() else []
    return ds.dataset(files, schema=schema, format="parquet") if files else None


def _window(row: dict[str, Any]) -> SlaWindow:
    """A history row as a SlaWindow (version 1 rows lack the newer columns: defaults)."""
    fields = {
        name: value for name, value in row.items() if value is not None and name != "latency_sketch"
    }
    for name in ("objectives", "met"):
        if name in fields:
            fields[name] = dict(fields[name])
    return SlaWindow.model_validate(fields)


def read_history(
    folder: Path, where: ds.Expression | None = None
) -> Iterator[tuple[SlaWindow, bytes | None]]:
    """Every window of the history (optionally filtered) with its latency sketch."""
    dataset = _dataset(folder, HISTORY_SCHEMA)
    if dataset is None:
        return
    for batch in dataset.to_batches(filter=where):
        for row in batch.to_pylist():
            yield _window(row), row["latency_sketch"]


def recent_windows(folder: Path, horizon_ms: int) -> list[SlaWindow]:
    """The windows that end within ``horizon_ms`` of the history's newest window end."""
    dataset = _dataset(folder, HISTORY_SCHEMA)
    if dataset is None:
        return []
    ends = dataset.to_table(columns=["window_end"]).column("window_end")
    if len(ends) == 0:
        return []
    newest = max(ends.to_pylist())
    return [
        window for window, _ in read_history(folder, ds.field("window_end") > newest - horizon_ms)
    ]


def late_counts(
    folder: Path, where: ds.Expression | None = None
) -> dict[tuple[str, str, int], int]:
    """(series, priority, window start) -> late rows recorded for it in the late history."""
    dataset = _dataset(folder)
    if dataset is None:
        return {}
    table = dataset.to_table(columns=["pair", "priority", "window_start"], filter=where)
    counts: dict[tuple[str, str, int], int] = {}
    for row in table.to_pylist():
        key = (row["pair"], row["priority"], row["window_start"])
        counts[key] = counts.get(key, 0) + 1
    return counts


@dataclass(frozen=True)
class PeriodReport:
    """Figures of one series over a period, merged from its windows (``babelstream sla report``)."""

    pair: str
    priority: str
    from_ms: int
    to_ms: int
    windows: int
    # windows without a sketch (written before sketches, or with sketches off): not in
    # the percentiles
    windows_without_sketch: int
    count: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    # the percentiles' normalized rank error (99% confidence)
    rank_error: float | None
    timeout_ratio: float | None
    error_ratio: float | None
    cancel_ratio: float | None
    rejected_ratio: float | None
    duplicates: int
    late: int
    objectives: dict[str, float] = field(default_factory=dict)
    # objective -> met over the whole period (merged percentiles, pooled ratios)
    met: dict[str, bool] = field(default_factory=dict)
    # objective -> share of the period's windows that met it
    windows_met: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pooled(windows: list[SlaWindow], ratio: str, total: int) -> float | None:
    if not total:
        return None
    bad = sum(round(float(getattr(w, ratio)) * w.count) for w in windows)
    return bad / total


def _period_met(
    objectives: dict[str, float], figures: dict[str, float | None], seconds: float, count: int
) -> dict[str, bool]:
    met: dict[str, bool] = {}
    for name, target in objectives.items():
        if name == "min_throughput_per_s":
            met[name] = seconds > 0 and count / seconds >= target
        elif figures.get(name) is not None:
            met[name] = float(figures[name]) <= target  # type: ignore[arg-type]
    return met


def merge_sketches(sketches: Iterable[bytes]) -> Any:
    """One KLL sketch of every latency the given window sketches summarise (None if none)."""
    from datasketches import kll_doubles_sketch

    merged = None
    for blob in sketches:
        sketch = kll_doubles_sketch.deserialize(blob)
        if merged is None:
            merged = sketch
        else:
            merged.merge(sketch)
    return merged


def period_report(
    sla: SlaSettings,
    pair: str,
    priority: str,
    from_ms: int,
    to_ms: int,
) -> PeriodReport:
    """Merge the windows of ``pair``/``priority`` lying wholly within [from_ms, to_ms)."""
    inside = (
        (ds.field("pair") == pair)
        & (ds.field("priority") == priority)
        & (ds.field("window_start") >= from_ms)
        & (ds.field("window_end") <= to_ms)
    )
    rows = list(read_history(sla.history_dir, inside))
    windows = [window for window, _ in rows]
    sketches = [sketch for _, sketch in rows if sketch is not None]
    merged = merge_sketches(sketches)
    count = sum(w.count for w in windows)
    quantiles: dict[str, float | None] = dict.fromkeys(PERIOD_QUANTILES)
    if merged is not None and not merged.is_empty():
        quantiles = {
            name: float(merged.get_quantile(p, True)) for name, p in PERIOD_QUANTILES.items()
        }
    ratios = {
        name: _pooled(windows, name, count)
        for name in ("timeout_ratio", "error_ratio", "cancel_ratio", "rejected_ratio")
    }
    objectives = sla.objectives_for(pair, priority).targets()
    seconds = sum((w.window_end - w.window_start) / 1000 for w in windows)
    late_where = (
        (ds.field("pair") == pair)
        & (ds.field("priority") == priority)
        & (ds.field("window_start") >= from_ms)
        & (ds.field("window_end") <= to_ms)
    )
    return PeriodReport(
        pair=pair,
        priority=priority,
        from_ms=from_ms,
        to_ms=to_ms,
        windows=len(windows),
        windows_without_sketch=len(rows) - len(sketches),
        count=count,
        **quantiles,
        rank_error=float(merged.normalized_rank_error(False)) if merged is not None else None,
        **ratios,
        duplicates=sum(w.duplicates for w in windows),
        late=sum(late_counts(sla.late_history_dir, late_where).values()),
        objectives=objectives,
        met=_period_met(objectives, {**quantiles, **ratios}, seconds, count),
        windows_met={
            name: sum(w.met.get(name, False) for w in windows) / len(windows) for name in objectives
        }
        if windows
        else {},
    )
