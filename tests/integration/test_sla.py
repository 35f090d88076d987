"""The Spark SLA job on real Kafka and real Spark, run as ``babelstream sla`` processes.

One scenario (module fixture) over fresh topics, two pairs, windows of 10 s
sliding by 5 s, 10 s of allowed lateness; times are seconds after ``BASE``:

1. results at 0-39 s are in the topic before the job starts: its first batch
   reads them all, the watermark becomes 39 - 10 = 29 s, and the windows
   ending at or before 25 s are emitted;
2. once they are on the sink topic: too-late results at 5-10 s (both their
   windows already emitted: excluded), late results at 26-29 s (older than the
   watermark, but their windows are still open: counted) and at 30-35 s
   (between watermark and newest: counted);
3. once those are read, results at 40-44 s move the watermark to 34 s, so
   the windows ending at 30 s are emitted (the late 26-29 s results with them);
4. the job is stopped (SIGTERM) with windows open in its state, and the
   checkpoint forgets its last commit, as if the job had died between writing
   that batch's windows and committing it; results at 40-59 s arrive while it
   is down;
5. the job restarts on the same checkpoint with ``--until-idle``: Spark
   re-runs the uncommitted batch (the sinks must skip it), then one "tick"
   per pair at 200 s moves the watermark past every window but the ticks' own.

Every window must appear once, with exact counts and ratios, and P50/P95/P99
within :func:`percentile_bounds` of numpy's on the same latencies.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from random import Random

import numpy as np
import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from pipeline.kafka_clients import admin_client
from pipeline.messages import SlaWindow, TranslationResult
from pipeline.settings import SlaSettings
from pipeline.stack.manager import Endpoints
from pipeline.stack.topics import TopicSpec, ensure_topics
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

BASE = 1_700_000_000_000  # a multiple of the slide
WINDOW_MS, SLIDE_MS, LATENESS_MS = 10_000, 5_000, 10_000
PAIRS = ("en_de", "de_en")
THRESHOLDS = {"en_de": 400, "de_en": SlaSettings().default_threshold_ms}
ACCURACY = SlaSettings().percentile_accuracy
TICK_S = 200.0
_BATCH = re.compile(r"jobs\.sla: batch (\d+): (\d+) input rows")
_WRITES = re.compile(r"jobs\.sla: batch (\d+): \d+ windows -> (\S+) \(already written: (\S+)\)")


@dataclass(frozen=True)
class Event:
    """One synthetic result; ``t`` in seconds after BASE."""

    request_id: str
    pair: str
    t: float
    latency_ms: int
    status: str
    cache: str | None

    @property
    def completed_at(self) -> int:
        return BASE + round(self.t * 1000)

    def to_json(self) -> bytes:
        src, tgt = self.pair.split("_")
        return TranslationResult(
            request_id=self.request_id, source_lang=src, target_lang=tgt, pair=self.pair,
            status=self.status, cache=self.cache, submitted_at=self.completed_at - self.latency_ms,
            completed_at=self.completed_at, latency_ms=self.latency_ms,
        ).to_json()


def make_events(rng: Random, tag: str, start_s: float, end_s: float, per_pair: int,
                newest_s: float | None = None) -> list[Event]:
    """``per_pair`` events per pair at random times in [start, end), latencies mixed."""
    events = []
    for pair in PAIRS:
        times = [rng.uniform(start_s, end_s) for _ in range(per_pair)]
        if newest_s is not None:
            times[-1] = newest_s
        for i, t in enumerate(times):
            latency = int(rng.choice([rng.uniform(20, 380), rng.uniform(380, 7000)]))
            status = rng.choices(["ok", "timeout", "error"], weights=[85, 8, 7])[0]
            cache = rng.choice([None, "miss", "l1", "l2", "window"])
            events.append(Event(f"{tag}-{pair}-{i}", pair, round(t, 3), latency, status, cache))
    return events


def window_starts(t: float) -> list[int]:
    """Start (ms after BASE) of every window holding time ``t``."""
    ms = round(t * 1000)
    last = ms // SLIDE_MS * SLIDE_MS
    return [s for s in range(last - WINDOW_MS + SLIDE_MS, last + 1, SLIDE_MS)]


def expected_windows(events: list[Event], watermark_s: float) -> dict[tuple[str, int], list[Event]]:
    """(pair, window start ms since epoch) -> events, for windows ending by ``watermark_s``."""
    windows: dict[tuple[str, int], list[Event]] = {}
    for event in events:
        for start in window_starts(event.t):
            if start + WINDOW_MS <= watermark_s * 1000:
                windows.setdefault((event.pair, BASE + start), []).append(event)
    return windows


def percentile_bounds(latencies: list[int], p: float, accuracy: int) -> tuple[int, int]:
    """numpy's inverted-CDF percentile, widened by the ⌊count/accuracy⌋ ranks Spark may be off."""
    x = np.sort(np.asarray(latencies))
    exact = np.quantile(x, p, method="inverted_cdf")
    slack = len(x) // accuracy
    low = int(np.searchsorted(x, exact, side="left")) - slack
    high = int(np.searchsorted(x, exact, side="right")) - 1 + slack
    return int(x[max(low, 0)]), int(x[min(high, len(x) - 1)])


class JobProcess:
    """``babelstream -v sla ...`` in a child process, its output collected line by line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "-v", "sla", *args], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self._readers = [threading.Thread(target=self._pump, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.stdout),
                                               (self.proc.stderr, self.stderr))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(stream: object, lines: list[str]) -> None:
        lines.extend(iter(stream.readline, ""))  # type: ignore[attr-defined]

    def input_rows(self) -> list[int]:
        """Input rows of each micro-batch the job logged so far."""
        return [int(m[2]) for line in list(self.stderr) if (m := _BATCH.search(line))]

    def sink_writes(self) -> list[tuple[int, str, str]]:
        """(batch id, sinks written, sinks skipped as already written) of each batch."""
        return [(int(m[1]), m[2], m[3]) for line in list(self.stderr)
                if (m := _WRITES.search(line))]

    def wait_for(self, done: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.proc.poll() is None, f"job exited ({self.proc.returncode}) {self.tail()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what} {self.tail()}"
            time.sleep(0.2)

    def wait(self, timeout_s: float) -> int:
        """Wait for the exit; returns the exit status."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"job still running after {timeout_s}s {self.tail()}")
        for reader in self._readers:
            reader.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        return "\n--- job stderr ---\n" + "".join(self.stderr[-lines:])


@dataclass(frozen=True)
class Phases:
    """The results sent, phase by phase (see the module docstring)."""

    on_time: list[Event]
    too_late: list[Event]
    late: list[Event]
    advance: list[Event]
    while_down: list[Event]
    ticks: list[Event]

    @classmethod
    def make(cls, rng: Random) -> Phases:
        return cls(
            on_time=make_events(rng, "p1", 0.0, 39.0, per_pair=160, newest_s=39.0),
            too_late=make_events(rng, "too-late", 5.0, 9.99, per_pair=12),
            late=make_events(rng, "late-old", 26.0, 28.99, per_pair=10)
            + make_events(rng, "late", 30.0, 34.99, per_pair=15),
            advance=make_events(rng, "advance", 40.0, 44.0, per_pair=10, newest_s=44.0),
            while_down=make_events(rng, "down", 40.0, 59.0, per_pair=100, newest_s=59.0),
            ticks=[Event(f"tick-{pair}", pair, TICK_S, 1, "ok", None) for pair in PAIRS],
        )

    @property
    def included(self) -> list[Event]:
        return self.on_time + self.late + self.advance + self.while_down + self.ticks


@dataclass
class Scenario:
    """What was sent, and what each run of the job wrote."""

    phases: Phases
    first_run: list[SlaWindow]
    second_run: list[SlaWindow]
    keys: list[bytes]
    console: list[str]
    history: Path
    replayed_batch: int
    second_run_writes: list[tuple[int, str, str]]

    @property
    def windows(self) -> list[SlaWindow]:
        return self.first_run + self.second_run


def _send(bootstrap: str, topic: str, events: list[Event]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for event in events:
        producer.send(topic, key=event.request_id.encode(), value=event.to_json())
    producer.flush()
    producer.close()


def _has_windows_ending(tail: TopicTail, end_ms: int) -> Callable[[], bool]:
    def done() -> bool:
        tail.read_until(lambda _: False, timeout_s=0.3)
        windows = [SlaWindow.from_json(record.value) for record in tail.records]
        return all((pair, end_ms) in {(w.pair, w.window_end) for w in windows} for pair in PAIRS)
    return done


@pytest.fixture(scope="module")
def topics(stack: Endpoints) -> Iterator[tuple[str, str]]:
    run = uuid.uuid4().hex[:8]
    names = {f"test.sla.{run}.results": 4, f"test.sla.{run}.windows": 1}
    ensure_topics(stack.settings.kafka, {n: TopicSpec(p) for n, p in names.items()})
    yield tuple(names)  # type: ignore[misc]
    admin = admin_client(stack.settings.kafka, "tests")
    admin.delete_topics(list(names))
    admin.close()


def forget_last_commit(checkpoint: Path) -> int:
    """Drop the checkpoint's last commit, as if the job died just before writing it."""
    commits = checkpoint / "commits"
    last = max(int(path.name) for path in commits.iterdir() if path.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def job_args(source: str, sink: str, work: Path) -> list[str]:
    return ["--source-topic", source, "--sink-topic", sink, "--checkpoint", str(work / "ck"),
            "--history", str(work / "history"), "--window", "10s", "--slide", "5s",
            "--watermark", "10s", "--trigger", "500ms", "--sinks", "kafka,parquet,console",
            "--threshold", f"en_de={THRESHOLDS['en_de']}"]


def run_first(job: JobProcess, phases: Phases, bootstrap: str, source: str,
              tail: TopicTail) -> None:
    """Phases 1-3 against a running job, then a stop between micro-batches."""
    job.wait_for(_has_windows_ending(tail, BASE + 25_000), "windows ending at 25 s")
    _send(bootstrap, source, phases.too_late + phases.late)
    sent = len(phases.on_time + phases.too_late + phases.late)
    job.wait_for(lambda: sum(job.input_rows()) == sent, "the late results read")
    _send(bootstrap, source, phases.advance)
    job.wait_for(_has_windows_ending(tail, BASE + 30_000), "windows ending at 30 s")
    job.proc.send_signal(signal.SIGTERM)
    assert job.wait(60) == 0, job.tail()


@pytest.fixture(scope="module")
def scenario(stack: Endpoints, topics: tuple[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    source, sink = topics
    work = tmp_path_factory.mktemp("sla")
    bootstrap = stack.bootstrap_servers
    env = {**os.environ, "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": bootstrap}
    phases = Phases.make(Random(20240607))
    tail = TopicTail(bootstrap, sink)
    jobs: list[JobProcess] = []
    try:
        _send(bootstrap, source, phases.on_time)
        jobs.append(first := JobProcess(job_args(source, sink, work), env))
        run_first(first, phases, bootstrap, source, tail)
        first_count = len(tail.drain(quiet_s=2.0))
        replayed = forget_last_commit(work / "ck")
        _send(bootstrap, source, phases.while_down)
        jobs.append(second := JobProcess([*job_args(source, sink, work), "--until-idle", "6s"],
                                         env))
        _send(bootstrap, source, phases.ticks)
        assert second.wait(180) == 0, second.tail()
        records = tail.drain(quiet_s=2.0)
    finally:
        for job in jobs:
            job.kill()
        tail.close()
    assert first.sink_writes()[-1] == (replayed, "kafka,parquet,console", "-"), \
        "the forgotten commit is the batch that wrote the first run's last windows"
    windows = [SlaWindow.from_json(r.value) for r in records]
    yield Scenario(
        phases=phases, first_run=windows[:first_count], second_run=windows[first_count:],
        keys=[r.key for r in records], console=first.stdout + second.stdout,
        history=work / "history", replayed_batch=replayed,
        second_run_writes=second.sink_writes(),
    )


def _key(window: SlaWindow) -> tuple[str, int]:
    return window.pair, window.window_start


def _by_key(windows: list[SlaWindow]) -> dict[tuple[str, int], SlaWindow]:
    return {_key(w): w for w in windows}


FIRST_WATERMARK_S = 44.0 - LATENESS_MS / 1000
LAST_WATERMARK_S = TICK_S - LATENESS_MS / 1000


def test_every_window_once_and_none_lost(scenario: Scenario) -> None:
    emitted = Counter(_key(w) for w in scenario.windows)
    assert [key for key, n in emitted.items() if n > 1] == []
    expected = expected_windows(scenario.phases.included, LAST_WATERMARK_S)
    assert set(emitted) == set(expected)
    assert len(expected) == 2 * (59 // 5 + 2), "windows [-5, 5) ... [55, 65) for both pairs"
    assert scenario.keys == [w.pair.encode() for w in scenario.windows]
    for window in scenario.windows:
        assert window.window_end - window.window_start == WINDOW_MS


def test_restart_resumes_from_the_checkpoint(scenario: Scenario) -> None:
    first = {_key(w) for w in scenario.first_run}
    expected_first = expected_windows(scenario.phases.included, FIRST_WATERMARK_S)
    assert first == set(expected_first), "first run: exactly the windows its watermark closed"
    assert first.isdisjoint(_key(w) for w in scenario.second_run)
    # windows open at the stop hold results sent before it: the state survived the restart
    resumed = expected_windows(scenario.phases.included, LAST_WATERMARK_S)
    for pair in PAIRS:
        before_stop = [e for e in resumed[(pair, BASE + 35_000)] if e in scenario.phases.advance]
        assert before_stop
        assert _by_key(scenario.second_run)[(pair, BASE + 35_000)].count == len(
            resumed[(pair, BASE + 35_000)])


def test_a_replayed_batch_is_not_written_again(scenario: Scenario) -> None:
    replays = [w for w in scenario.second_run_writes if w[0] == scenario.replayed_batch]
    assert replays == [(scenario.replayed_batch, "-", "console,kafka,parquet")]


def test_counts_and_ratios_are_exact(scenario: Scenario) -> None:
    expected = expected_windows(scenario.phases.included, LAST_WATERMARK_S)
    for key, window in _by_key(scenario.windows).items():
        events = expected[key]
        n = len(events)
        timeouts = sum(e.status == "timeout" or e.latency_ms > THRESHOLDS[e.pair] for e in events)
        assert window.count == n, key
        assert window.timeout_ratio == timeouts / n, key
        assert window.error_ratio == sum(e.status == "error" for e in events) / n, key
        assert window.cache_hit_ratio == sum(
            e.cache in ("l1", "l2", "window") for e in events) / n, key


def _in_window(events: list[Event], pair: str, start_ms: int) -> list[Event]:
    return [e for e in events
            if e.pair == pair and start_ms <= e.completed_at - BASE < start_ms + WINDOW_MS]


def test_late_results_within_the_watermark_count_and_later_ones_do_not(
        scenario: Scenario) -> None:
    windows, phases = _by_key(scenario.windows), scenario.phases
    for pair in PAIRS:
        for start in (0, 5_000):  # both windows of the too-late results closed before they came
            assert _in_window(phases.too_late, pair, start)
            assert windows[(pair, BASE + start)].count == len(
                _in_window(phases.on_time, pair, start))
        late = [e for e in phases.late if e.pair == pair]
        assert any(e.t < 39.0 - LATENESS_MS / 1000 for e in late), "older than the watermark"
        for start in (20_000, 25_000, 30_000):
            assert _in_window(late, pair, start)
            assert windows[(pair, BASE + start)].count == len(
                _in_window(phases.included, pair, start))


def test_percentiles_agree_with_numpy(scenario: Scenario) -> None:
    expected = expected_windows(scenario.phases.included, LAST_WATERMARK_S)
    for key, window in _by_key(scenario.windows).items():
        latencies = [e.latency_ms for e in expected[key]]
        for p, value in ((0.5, window.p50_ms), (0.95, window.p95_ms), (0.99, window.p99_ms)):
            low, high = percentile_bounds(latencies, p, ACCURACY)
            assert low <= value <= high, (key, p, value, low, high)


def test_parquet_history_and_console_match_kafka(scenario: Scenario) -> None:
    rows = pq.ParquetDataset(scenario.history).read().to_pylist()
    history = [SlaWindow.model_validate(row) for row in rows]
    assert sorted(history, key=_key) == sorted(scenario.windows, key=_key)
    lines = [line for line in scenario.console if line.startswith(PAIRS)]
    assert len(lines) == len(scenario.windows)
