"""The pure parts of the Spark SLA job: no pyspark here, so unit tests stay fast.

The job itself (:mod:`jobs.sla`) reads ``translate.results``, aggregates per
pair and event-time window, and hands each finished window to the sinks as a
plain row; this module parses the job's options, turns rows into
:class:`~pipeline.messages.SlaWindow` messages, keeps the per-sink batch log
that makes sink writes idempotent across restarts, and follows the query's
progress to decide when an ``--until-idle`` run is done.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.errors import BabelStreamError, ConfigError, ContractError
from pipeline.messages import SlaWindow
from pipeline.pairs import Pair

PERCENTILES = (0.5, 0.95, 0.99)
CACHE_HITS = ("l1", "l2", "window")

# The explicit schema the job parses ``translate.results`` with: the subset of
# TranslationResult it needs, as Spark DDL types (tests check it against the model).
RESULT_FIELDS: dict[str, str] = {
    "pair": "STRING",
    "status": "STRING",
    "cache": "STRING",
    "completed_at": "BIGINT",
    "latency_ms": "BIGINT",
}


class SlaJobError(BabelStreamError):
    """The SLA job's streaming query failed."""


_DURATION = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in ``500ms``, ``5s``, ``1.5m``, ``2h`` or a bare number of seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(f"invalid duration {text!r}: expected e.g. 500ms, 5s, 1m, 2h")
    return float(match["number"]) * _UNIT_SECONDS[match["unit"] or "s"]


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


def result_schema_ddl() -> str:
    """The Spark DDL of :data:`RESULT_FIELDS` (``request_id STRING, pair STRING, ...``)."""
    return ", ".join(f"{name} {kind}" for name, kind in RESULT_FIELDS.items())


def to_sla_window(row: Mapping[str, Any]) -> SlaWindow:
    """One aggregated row of the job (``percentiles`` = P50, P95, P99) as a SlaWindow."""
    p50, p95, p99 = row["percentiles"]
    return SlaWindow(
        pair=row["pair"],
        window_start=int(row["window_start"]),
        window_end=int(row["window_end"]),
        count=int(row["count"]),
        p50_ms=float(p50),
        p95_ms=float(p95),
        p99_ms=float(p99),
        timeout_ratio=float(row["timeout_ratio"]),
        error_ratio=float(row["error_ratio"]),
        cache_hit_ratio=float(row["cache_hit_ratio"]),
    )


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def describe(window: SlaWindow) -> str:
    """One human-readable line per window, for the console sink."""
    return (
        f"{window.pair:<12} [{_utc(window.window_start)}, {_utc(window.window_end)}) "
        f"n={window.count:<6} p50={window.p50_ms:.0f}ms p95={window.p95_ms:.0f}ms "
        f"p99={window.p99_ms:.0f}ms timeout={window.timeout_ratio:.3f} "
        f"error={window.error_ratio:.3f} cache_hit={window.cache_hit_ratio:.3f}"
    )


def _last_id(folder: Path) -> int:
    return max((int(path.name) for path in folder.glob("*") if path.name.isdigit()), default=-1)


def checkpoint_batches(checkpoint: Path) -> tuple[int, int]:
    """(last planned, last committed) micro-batch id of a Spark checkpoint (-1: none).

    Spark logs a batch's offsets before running it and commits it after the
    sink returned; a planned batch beyond the last commit is re-run on start.
    """
    return _last_id(checkpoint / "offsets"), _last_id(checkpoint / "commits")


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


@dataclass
class ProgressTracker:
    """Follows a streaming query's progress reports (plain dicts, as Spark gives them).

    ``idle()`` is true once no report with input rows has arrived for
    ``idle_s`` seconds (counted from creation before the first one). Spark
    also reports progress while idle, under the next batch's id; a report
    counts once, by batch id and timestamp.
    """

    idle_s: float | None = None
    clock: Callable[[], float] = time.monotonic
    # called with the input rows of each new micro-batch that had some (progress bars)
    on_input: Callable[[int], object] | None = None
    input_batches: list[BatchStat] = field(default_factory=list, init=False)
    _seen: set[tuple[int, str]] = field(default_factory=set, init=False, repr=False)
    _last_input: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._last_input = self.clock()

    def observe(self, progress: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Take in progress reports (repeats are ignored); returns the new ones."""
        new = []
        for report in progress:
            key = (int(report["batchId"]), str(report["timestamp"]))
            if key in self._seen:
                continue
            self._seen.add(key)
            new.append(report)
            rows = int(report.get("numInputRows") or 0)
            if rows:
                ms = int((report.get("durationMs") or {}).get("triggerExecution", 0))
                self.input_batches.append(BatchStat(key[0], rows, ms))
                self._last_input = self.clock()
                if self.on_input is not None:
                    self.on_input(rows)
        return new

    def idle(self) -> bool:
        """Whether the ``idle_s`` limit has passed without new input."""
        return self.idle_s is not None and self.clock() - self._last_input >= self.idle_s


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
