"""The pure parts of the Spark SLA job: no pyspark here, so unit tests stay fast.

The job itself (:mod:`jobs.sla`) reads ``translate.results`` (and the
workers' ticks), aggregates per series (pair and priority class) and
event-time window, and hands each finished window to the sinks as a plain
row; this module parses the job's options, turns rows into
:class:`~pipeline.contract.messages.SlaWindow` messages (objectives met, error-budget
burn rates), keeps the batch log that makes file sinks' writes idempotent
across restarts, names the Kafka sinks' transactions, and follows the query's
progress to decide when an ``--until-idle`` run is done.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.contract.messages import LateResult, SlaWindow
from pipeline.contract.pairs import SLA_TRANSACTION_PREFIX, Pair
from pipeline.errors import BabelStreamError, ConfigError, ContractError
from pipeline.settings import SlaSettings, SloObjectives

PERCENTILES = (0.5, 0.95, 0.99)
CACHE_HITS = ("l1", "l2", "window")
# trailing periods of the error-budget burn rates (SlaWindow.burn_rate_1h / _6h)
BURN_HORIZONS_MS = (3_600_000, 21_600_000)

# The explicit schemas the job parses ``translate.results`` and ``translate.ticks``
# with: the subsets of TranslationResult and Tick it needs, as Spark DDL types
# (tests check them against the models).
RESULT_FIELDS: dict[str, str] = {
    "request_id": "STRING",
    "pair": "STRING",
    "status": "STRING",
    "reason": "STRING",
    "cache": "STRING",
    "job_id": "STRING",
    "completed_at": "BIGINT",
    "latency_ms": "BIGINT",
}
TICK_FIELDS: dict[str, str] = {"emitted_at": "BIGINT"}


class SlaJobError(BabelStreamError):
    """The SLA job's streaming query failed."""


def spark_interval(seconds: float) -> str:
    """A Spark interval string with millisecond precision (``5000 milliseconds``)."""
    ms = round(seconds * 1000)
    if ms < 0 or (seconds > 0 and ms == 0):
        raise ConfigError(f"duration {seconds}s is not a positive number of milliseconds")
    return f"{ms} milliseconds"


def parse_thresholds(items: Iterable[str]) -> dict[str, int]:
    """``["en_de=3000", ...]`` -> ``{"en_de": 3000}`` (pair id -> SLA threshold in ms)."""
    thresholds: dict[str, int] = {}
    for item in items:
        pair_id, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise ConfigError(f"invalid threshold {item!r}: expected PAIR=MS, e.g. en_de=3000")
        try:
            Pair.parse(pair_id.strip())
        except ContractError as exc:
            raise ConfigError(str(exc)) from exc
        thresholds[pair_id.strip()] = int(value)
    return thresholds


def schema_ddl(fields: Mapping[str, str]) -> str:
    """The Spark DDL of a field map (``request_id STRING, pair STRING, ...``)."""
    return ", ".join(f"{name} {kind}" for name, kind in fields.items())


def result_schema_ddl() -> str:
    """The Spark DDL of :data:`RESULT_FIELDS`."""
    return schema_ddl(RESULT_FIELDS)


def objectives_met(objectives: SloObjectives, window: SlaWindow) -> dict[str, bool]:
    """Objective name -> whether ``window`` met it (latency and ratios at most, throughput at
    least the target)."""
    seconds = (window.window_end - window.window_start) / 1000
    figures = {
        "p95_ms": window.p95_ms,
        "p99_ms": window.p99_ms,
        "timeout_ratio": window.timeout_ratio,
        "error_ratio": window.error_ratio,
    }
    met = {
        name: figures[name] <= target
        for name, target in objectives.targets().items()
        if name in figures
    }
    if objectives.min_throughput_per_s is not None:
        met["min_throughput_per_s"] = window.count / seconds >= objectives.min_throughput_per_s
    return met


class BurnRates:
    """Error-budget burn rates per series: the timeout ratio of the trailing hour (6 hours) of
    windows, over the ``timeout_ratio`` objective (1.0 burns the budget exactly on time).

    Each window counts in the periods ending at the windows after it whose end is
    at most a horizon later (its own end included). Adding a window again
    (a re-run micro-batch) replaces it. Windows older than the longest horizon
    before the newest one are forgotten.
    """

    def __init__(self, horizons_ms: tuple[int, ...] = BURN_HORIZONS_MS) -> None:
        self.horizons_ms = horizons_ms
        self._windows: dict[tuple[str, str], dict[int, tuple[int, int]]] = defaultdict(dict)

    def add(self, series: str, priority: str, window_end: int, count: int, timeouts: int) -> None:
        """Record one window's result count and timeouts."""
        windows = self._windows[(series, priority)]
        windows[window_end] = (count, timeouts)
        horizon = max(self.horizons_ms)
        newest = max(windows)
        for end in [end for end in windows if end <= newest - horizon]:
            del windows[end]

    def rates(
        self, series: str, priority: str, window_end: int, budget: float | None
    ) -> tuple[float | None, ...]:
        """Burn rate of each horizon at ``window_end`` (None without a budget or results)."""
        windows = self._windows.get((series, priority), {})
        out: list[float | None] = []
        for horizon in self.horizons_ms:
            count = timeouts = 0
            for end, (n, bad) in windows.items():
                if window_end - horizon < end <= window_end:
                    count, timeouts = count + n, timeouts + bad
            out.append(timeouts / count / budget if budget and count else None)
        return tuple(out)


@dataclass(frozen=True)
class WindowFigures:
    """One aggregated row of the job: the counts of one series and window."""

    series: str
    priority: str
    window_start: int
    window_end: int
    count: int
    received: int
    percentiles: tuple[float, float, float]
    timeouts: int
    errors: int
    cache_hits: int
    cancelled: int
    rejected: int
    sketch: bytes | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WindowFigures:
        """From the job's output row (a ``Row.asDict(recursive=True)``)."""
        p50, p95, p99 = row["percentiles"]
        sketch = row.get("sketch")
        return cls(
            series=row["series"],
            priority=row["priority"],
            window_start=int(row["window_start"]),
            window_end=int(row["window_end"]),
            count=int(row["count"]),
            received=int(row["received"]),
            percentiles=(float(p50), float(p95), float(p99)),
            timeouts=int(row["timeouts"]),
            errors=int(row["errors"]),
            cache_hits=int(row["cache_hits"]),
            cancelled=int(row["cancelled"]),
            rejected=int(row["rejected"]),
            sketch=bytes(sketch) if sketch is not None else None,
        )


def to_sla_window(figures: WindowFigures, sla: SlaSettings, burn: BurnRates) -> SlaWindow:
    """The SlaWindow of one aggregated row: ratios, objectives met, burn rates.

    Adds the window to ``burn`` first, so its own results count in its burn rates.
    """
    n = figures.count
    objectives = sla.objectives_for(figures.series, figures.priority)
    burn.add(figures.series, figures.priority, figures.window_end, n, figures.timeouts)
    p50, p95, p99 = figures.percentiles
    window = SlaWindow(
        pair=figures.series,
        priority=figures.priority,  # type: ignore[arg-type]
        window_start=figures.window_start,
        window_end=figures.window_end,
        count=n,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        timeout_ratio=figures.timeouts / n,
        error_ratio=figures.errors / n,
        cache_hit_ratio=figures.cache_hits / n,
        cancel_ratio=figures.cancelled / n,
        rejected_ratio=figures.rejected / n,
        duplicates=figures.received - n,
        objectives=objectives.targets(),
    )
    burn_1h, burn_6h = burn.rates(
        figures.series, figures.priority, figures.window_end, objectives.timeout_ratio
    )
    return window.model_copy(
        update={
            "met": objectives_met(objectives, window),
            "burn_rate_1h": burn_1h,
            "burn_rate_6h": burn_6h,
        }
    )


def history_row(window: SlaWindow, sketch: bytes | None) -> dict[str, Any]:
    """One row of the Parquet history: the window's fields plus its latency sketch."""
    return {**window.model_dump(), "latency_sketch": sketch}


def to_late_result(row: Mapping[str, Any], watermark_ms: int) -> LateResult:
    """One late row of the side query (a result whose window closed) as a LateResult."""
    completed = int(row["completed_at"])
    return LateResult(
        request_id=row["request_id"],
        pair=row["series"],
        priority=row["priority"],
        status=row["status"],
        latency_ms=int(row["latency_ms"]),
        completed_at=completed,
        window_start=int(row["window_start"]),
        window_end=int(row["window_end"]),
        watermark=watermark_ms,
        late_by_ms=max(0, watermark_ms - completed),
    )


def _batch_watermark(checkpoint: Path, batch_id: int) -> int:
    """``batchWatermarkMs`` of ``<checkpoint>/offsets/<batch_id>`` (0 if it has none)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    return int(json.loads(lines[1]).get("batchWatermarkMs", 0)) if len(lines) > 1 else 0


def late_watermark(checkpoint: Path, batch_id: int) -> int:
    """The watermark by which micro-batch ``batch_id`` drops input rows as late.

    Spark writes ``<checkpoint>/offsets/<batch>`` before running a batch, with
    the watermark that batch evicts state by (``batchWatermarkMs``). Since
    Spark 3.4 a batch drops late *input* by the previous batch's watermark
    (so chained stateful operators agree), i.e. that of ``batch_id - 1``; the
    first batch drops nothing. The previous batch's file is always retained
    while this one runs.
    """
    return _batch_watermark(checkpoint, batch_id - 1) if batch_id > 0 else 0


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def describe(window: SlaWindow) -> str:
    """One human-readable line per window, for the console sink."""
    missed = sorted(name for name, ok in window.met.items() if not ok)
    burn = "" if window.burn_rate_1h is None else f" burn1h={window.burn_rate_1h:.2f}"
    return (
        f"{window.pair:<12} {window.priority[:4]} "
        f"[{_utc(window.window_start)}, {_utc(window.window_end)}) "
        f"n={window.count:<6} p50={window.p50_ms:.0f}ms p95={window.p95_ms:.0f}ms "
        f"p99={window.p99_ms:.0f}ms timeout={window.timeout_ratio:.3f} "
        f"error={window.error_ratio:.3f} cache_hit={window.cache_hit_ratio:.3f} "
        f"dup={window.duplicates}{burn} missed={','.join(missed) or '-'}"
    )


def _last_id(folder: Path) -> int:
    return max((int(path.name) for path in folder.glob("*") if path.name.isdigit()), default=-1)


def checkpoint_batches(checkpoint: Path) -> tuple[int, int]:
    """(last planned, last committed) micro-batch id of a Spark checkpoint (-1: none).

    Spark logs a batch's offsets before running it and commits it after the
    sink returned; a planned batch beyond the last commit is re-run on start.
    """
    return _last_id(checkpoint / "offsets"), _last_id(checkpoint / "commits")


def sink_transactional_id(sla: SlaSettings) -> str:
    """The Kafka sinks' transactional id: the configured one, or one per checkpoint.

    Stable across restarts (a restarted job must fence and abort its predecessor's
    open transaction), distinct for jobs on distinct checkpoints.
    """
    if sla.transactional_id:
        return sla.transactional_id
    digest = hashlib.blake2b(str(sla.checkpoint_dir.resolve()).encode(), digest_size=6)
    return f"{SLA_TRANSACTION_PREFIX}{digest.hexdigest()}"


@dataclass(frozen=True)
class JobRun:
    """What the SLA job was last started with, kept beside its checkpoint: the dashboard
    reads it to say why it shows no windows (a run with only the console sink, say)."""

    sinks: tuple[str, ...]
    sink_topic: str
    started_at: int

    @staticmethod
    def path(checkpoint_dir: Path) -> Path:
        return checkpoint_dir / "sinks" / "run.json"

    def write(self, checkpoint_dir: Path) -> None:
        """Replace the record atomically."""
        path = self.path(checkpoint_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**self.__dict__, "sinks": list(self.sinks)}))
        os.replace(tmp, path)

    @classmethod
    def read(cls, checkpoint_dir: Path) -> JobRun | None:
        """The last run's record, or None when the job never ran with this checkpoint."""
        try:
            doc = json.loads(cls.path(checkpoint_dir).read_text())
            return cls(tuple(doc["sinks"]), str(doc["sink_topic"]), int(doc["started_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


class BatchLog:
    """The id of the last micro-batch one sink has fully written, kept in a file.

    Spark re-runs a micro-batch whose commit it did not record (the job stopped
    or crashed mid-batch) with the same id and the same rows; a sink skips a
    batch it already wrote, so a restart emits no window twice. The file is
    replaced atomically after the sink's write is durable.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def last(self) -> int | None:
        """The last batch written, or None before the first."""
        try:
            return int(self.path.read_text().strip())
        except FileNotFoundError:
            return None

    def done(self, batch_id: int) -> bool:
        """Whether ``batch_id`` was already written."""
        last = self.last()
        return last is not None and batch_id <= last

    def mark(self, batch_id: int) -> None:
        """Record ``batch_id`` as written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{batch_id}\n")
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class BatchStat:
    """One micro-batch that read input: its id, input rows and ``triggerExecution`` time."""

    batch_id: int
    rows: int
    ms: int


def input_rows(report: Mapping[str, Any]) -> int:
    """Records a micro-batch read (the job's plan scans its source once per micro-batch)."""
    return int(report.get("numInputRows") or 0)


def _partition_offsets(offsets: Any, topic: str) -> dict[str, int] | None:
    """One topic's partition -> offset in a Kafka source's offsets (a dict, or its JSON)."""
    if isinstance(offsets, str):
        try:
            offsets = json.loads(offsets)
        except ValueError:
            return None
    partitions = offsets.get(topic) if isinstance(offsets, Mapping) else None
    if not isinstance(partitions, Mapping):
        return None
    return {str(partition): int(offset) for partition, offset in partitions.items()}


def topic_rows(report: Mapping[str, Any], topic: str) -> int | None:
    """Records of ``topic`` a micro-batch read, from its Kafka source's start and end offsets
    (at most the source's input rows); None when no source reads ``topic``.

    A first batch has no start offsets (Spark leaves them out): it counts from offset 0.
    """
    counted: int | None = None
    for source in report.get("sources") or ():
        end = _partition_offsets(source.get("endOffset"), topic)
        if end is None:
            continue
        start = _partition_offsets(source.get("startOffset"), topic) or {}
        read = sum(max(0, offset - start.get(partition, 0)) for partition, offset in end.items())
        counted = (counted or 0) + min(read, int(source.get("numInputRows") or 0))
    return counted


@dataclass
class ProgressTracker:
    """Follows a streaming query's progress reports (plain dicts, as Spark gives them).

    *Activity* is input on ``activity_topic`` (the results; a worker's ticks
    arrive all the time and are not activity), or any input without it or
    when a report does not say (:func:`topic_rows`). ``idle()`` is true once
    the latest report had no activity and none has come for ``idle_s``
    seconds. A query that has not reported yet (still starting, slowly on a
    loaded machine) or whose latest batch had activity (the next one may be
    running, however long it takes) is not idle. Spark also reports progress
    while idle, under the next batch's id; a report counts once, by batch id
    and timestamp.
    """

    idle_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    # called with the input rows of each new micro-batch that had some (progress bars)
    on_input: Callable[[int], object] | None = None
    activity_topic: str | None = None
    input_batches: list[BatchStat] = field(default_factory=list, init=False)
    # records of the activity topic read (every input record without one)
    results: int = field(default=0, init=False)
    _seen: set[tuple[int, str]] = field(default_factory=set, init=False, repr=False)
    _last_activity: float | None = field(default=None, init=False, repr=False)
    _latest_active: bool = field(default=False, init=False, repr=False)

    def observe(self, progress: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Take in progress reports (repeats are ignored); returns the new ones."""
        new = []
        for report in progress:
            key = (int(report["batchId"]), str(report["timestamp"]))
            if key in self._seen:
                continue
            self._seen.add(key)
            new.append(report)
            if self._last_activity is None:
                self._last_activity = self.clock()
            rows = input_rows(report)
            on_topic = (
                None if self.activity_topic is None else topic_rows(report, self.activity_topic)
            )
            active = rows if on_topic is None else on_topic
            self._latest_active = active > 0
            self.results += active
            if active:
                self._last_activity = self.clock()
            if rows:
                ms = int((report.get("durationMs") or {}).get("triggerExecution", 0))
                self.input_batches.append(BatchStat(key[0], rows, ms))
                if self.on_input is not None:
                    self.on_input(rows)
        return new

    def idle(self) -> bool:
        """Whether the ``idle_s`` limit has passed without activity."""
        return (
            self.idle_s is not None
            and self._last_activity is not None
            and not self._latest_active
            and self.clock() - self._last_activity >= self.idle_s
        )


def _rate(batches: Iterable[BatchStat]) -> float:
    rows, ms = 0, 0
    for batch in batches:
        rows, ms = rows + batch.rows, ms + batch.ms
    return rows * 1000 / ms if ms else 0.0


@dataclass(frozen=True)
class RunSummary:
    """What one run of the job did."""

    input_batches: tuple[BatchStat, ...]
    windows: int
    wall_s: float
    late_rows: int = 0
    # input records that were results (the others: ticks); None: not told apart
    results: int | None = None

    @property
    def input_rows(self) -> int:
        return sum(batch.rows for batch in self.input_batches)

    @property
    def busy_s(self) -> float:
        """Seconds of micro-batch time spent on batches with input."""
        return sum(batch.ms for batch in self.input_batches) / 1000

    @property
    def rows_per_busy_s(self) -> float:
        """Input rows per second of micro-batch time, over every batch with input."""
        return _rate(self.input_batches)

    @property
    def warm_rows_per_busy_s(self) -> float:
        """The same without the run's first batch, which pays for JVM warm-up."""
        return _rate(self.input_batches[1:])
