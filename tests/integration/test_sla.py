"""The Spark SLA job on real Kafka and real Spark, run as ``babelstream sla`` processes.

One scenario (module fixture) over fresh topics; 1 s tumbling windows, 5 s of
lateness, 500 ms triggers; times are seconds after ``BASE``:

1. before the job starts: results of en_de at 0-1000 s (1,000 windows) and
   de_en at 0-100 s, 20 % of them repeated (half as identical records, half as
   a re-processed copy up to 2 s later with another latency), bulk results
   (``job_id``) and results the router gave ``unsupported_pair``, and one tick
   at 1,100 s. The first batch reads it all; the next emits every window.
2. once the windows are out: results at 100-200 s, whose windows have closed:
   late rows, expected on the late topic with their count;
3. the job is stopped (SIGTERM) and its checkpoint forgets its last commit;
   a second run re-runs that batch (its sinks skip it), then reads real-time
   results of en_de for a few seconds and, from then on, only the ticks a
   worker would publish (:class:`pipeline.sla.ticks.TickSource`, every second):
   the pair's last window must be emitted within the stated bound.

Checked: every window once; counts, ratios and percentiles exact as if the
repeats had never been sent, repeats counted per window; series per pair,
priority and "unsupported"; objectives met and burn rates against a hand
computation; the period report over en_de's 1,000 windows against numpy
within the sketch's rank error; late rows; the history and console match
Kafka; the job listens on loopback only.
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
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

import numpy as np
import psutil
import pytest
from click.testing import CliRunner
from kafka import KafkaProducer

from pipeline.cli.main import main
from pipeline.cli.sla_run import run_state
from pipeline.contract.messages import (
    UNSUPPORTED_PAIR_REASON,
    LateResult,
    SlaWindow,
    TranslationResult,
    now_ms,
)
from pipeline.kafka.check import admin_client
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import SlaSettings
from pipeline.sla.history import read_history
from pipeline.sla.logic import JobRun
from pipeline.sla.ticks import TickSource
from pipeline.stack.manager import Endpoints
from tests.integration.helpers import TopicTail

# Two job runs (each a JVM start and a cold first batch): about 3 minutes on an idle 2-core
# machine, over 10 when it is shared with other heavy work.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

BASE = 1_700_000_000_000
WINDOW_MS, LATENESS_S, TRIGGER_S, TICK_S = 1_000, 5.0, 0.5, 1.0
THRESHOLDS = {"en_de": 400}
DEFAULT_THRESHOLD = SlaSettings().default_threshold_ms
BULK_THRESHOLD = 3000
OBJECTIVE = {"p95_ms": 2000.0, "timeout_ratio": 0.2}
BULK_OBJECTIVE = {"timeout_ratio": 0.5}
ACCURACY = SlaSettings().percentile_accuracy
SKETCH_K = SlaSettings().sketch_k
CLOSING_TICK_S = 1100.0
_BATCH = re.compile(r"jobs\.sla: batch (\d+): (\d+) input rows in (\d+) ms")
_WRITES = re.compile(r"jobs\.sla: batch (\d+): \d+ windows -> (\S+) \(already written: (\S+)\)")


@dataclass(frozen=True)
class Event:
    """One synthetic result; ``t`` in seconds after BASE (or epoch ms with ``absolute``)."""

    request_id: str
    pair: str
    t: float
    latency_ms: int
    status: str
    cache: str | None
    job_id: str | None = None
    reason: str | None = None
    absolute_ms: int | None = None

    @property
    def completed_at(self) -> int:
        return self.absolute_ms if self.absolute_ms is not None else BASE + round(self.t * 1000)

    @property
    def series(self) -> tuple[str, str]:
        pair = "unsupported" if self.reason == UNSUPPORTED_PAIR_REASON else self.pair
        return pair, "bulk" if self.job_id else "interactive"

    @property
    def window_start(self) -> int:
        return self.completed_at // WINDOW_MS * WINDOW_MS

    @property
    def timed_out(self) -> bool:
        pair, priority = self.series
        limit = BULK_THRESHOLD if priority == "bulk" else THRESHOLDS.get(pair, DEFAULT_THRESHOLD)
        return self.status == "timeout" or self.latency_ms > limit

    def to_json(self) -> bytes:
        src, tgt = self.pair.split("_")
        return TranslationResult(
            request_id=self.request_id,
            source_lang=src,
            target_lang=tgt,
            pair=self.pair,
            status=self.status,
            cache=self.cache,
            job_id=self.job_id,
            reason=self.reason,
            submitted_at=self.completed_at - self.latency_ms,
            completed_at=self.completed_at,
            latency_ms=self.latency_ms,
        ).to_json()


def make_events(
    rng: Random, tag: str, pair: str, start_s: int, end_s: int, per_second: int, **fields: str
) -> list[Event]:
    """``per_second`` results in every second of [start, end), latencies and statuses mixed."""
    events = []
    for second in range(start_s, end_s):
        for i in range(per_second):
            latency = int(rng.choice([rng.uniform(20, 380), rng.uniform(380, 4000)]))
            status = rng.choices(
                ["ok", "timeout", "error", "cancelled", "rejected"], weights=[80, 8, 6, 3, 3]
            )[0]
            events.append(
                Event(
                    f"{tag}-{pair}-{second}-{i}",
                    pair,
                    round(second + rng.uniform(0, 0.999), 3),
                    latency,
                    status,
                    rng.choice([None, "miss", "l1", "l2", "window"]),
                    **fields,
                )
            )
    return events


def with_repeats(
    rng: Random, originals: list[Event], share: float
) -> tuple[list[Event], list[Event]]:
    """The stream with ``share`` of the results repeated (each copy a little after its
    original in the stream), and the copies alone."""
    stream, copies = [], []
    for event in originals:
        stream.append(event)
        if rng.random() < share:
            copy = (
                event
                if rng.random() < 0.5
                else Event(
                    event.request_id,
                    event.pair,
                    round(event.t + rng.uniform(0, 2), 3),
                    event.latency_ms + 7,
                    event.status,
                    event.cache,
                    event.job_id,
                    event.reason,
                )
            )
            copies.append(copy)
            stream.append(copy)
    return stream, copies


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
            [sys.executable, "-m", "pipeline", "-v", "sla", *args],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._readers = [
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True)
            for stream, lines in ((self.proc.stdout, self.stdout), (self.proc.stderr, self.stderr))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _pump(stream: object, lines: list[str]) -> None:
        lines.extend(iter(stream.readline, ""))  # type: ignore[attr-defined]

    def batches(self) -> list[tuple[int, int, int]]:
        """(batch id, input rows, milliseconds) of each windows-query batch logged so far."""
        return [
            (int(m[1]), int(m[2]), int(m[3]))
            for line in list(self.stderr)
            if (m := _BATCH.search(line))
        ]

    def sink_writes(self) -> list[tuple[int, str, str]]:
        """(batch id, sinks written, sinks skipped as already written) of each batch."""
        return [
            (int(m[1]), m[2], m[3]) for line in list(self.stderr) if (m := _WRITES.search(line))
        ]

    def wait_for(self, done: Callable[[], bool], what: str, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert self.proc.poll() is None, f"job exited ({self.proc.returncode}) {self.tail()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what} {self.tail()}"
            time.sleep(0.2)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 120.0) -> None:
        """``sig`` (SIGINT: Ctrl-C), then wait for a clean exit: 0, no traceback."""
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"job still running {timeout_s}s after {sig.name} {self.tail()}")
        for reader in self._readers:
            reader.join(timeout=10)
        assert rc == 0, self.tail()
        assert not any("Traceback" in line for line in self.stderr), self.tail()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 40) -> str:
        # without the query plans Spark prints with a failure
        text = [line for line in self.stderr if not line.lstrip().startswith(("+-", ":", "~"))]
        return "\n--- job stderr ---\n" + "".join(text[-lines:])


def listening_addresses(pid: int) -> set[str]:
    """IP addresses a process and its children listen on (TCP)."""
    parent = psutil.Process(pid)
    addresses = set()
    for proc in [parent, *parent.children(recursive=True)]:
        try:
            connections = proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        addresses |= {c.laddr.ip for c in connections if c.status == psutil.CONN_LISTEN}
    return addresses


@dataclass(frozen=True)
class Phases:
    """The results sent, phase by phase (see the module docstring)."""

    originals: list[Event]
    stream: list[Event]
    copies: list[Event]
    late: list[Event]

    @classmethod
    def make(cls, rng: Random) -> Phases:
        originals = (
            make_events(rng, "p1", "en_de", 0, 1000, 2)
            + make_events(rng, "p1", "de_en", 0, 100, 4)
            + make_events(rng, "bulk", "en_de", 0, 50, 3, job_id="job-1")
            + make_events(rng, "typo", "en_en-AX", 10, 30, 2, reason=UNSUPPORTED_PAIR_REASON)
        )
        stream, copies = with_repeats(rng, originals, 0.2)
        late = make_events(rng, "late", "en_de", 100, 200, 1)
        return cls(originals, stream, copies, late)


@dataclass
class Scenario:
    """What was sent, and what the two runs of the job wrote."""

    phases: Phases
    windows: list[SlaWindow]
    keys: list[bytes]
    late: list[LateResult]
    console: list[str]
    history: Path
    late_history: Path
    replayed_batch: int
    second_run_writes: list[tuple[int, str, str]]
    listening: set[str]
    realtime: list[Event]
    realtime_emitted_ms: dict[int, int] = field(default_factory=dict)
    max_batch_ms: int = 0


def _stage(started: float, what: str) -> None:
    print(f"[sla scenario] {time.monotonic() - started:6.1f}s {what}", file=sys.stderr, flush=True)


def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for key, value in records:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _results(events: list[Event]) -> list[tuple[bytes, bytes]]:
    return [(e.request_id.encode(), e.to_json()) for e in events]


def _windows(tail: TopicTail) -> list[SlaWindow]:
    tail.read_until(lambda _: False, timeout_s=0.3)
    return [SlaWindow.from_json(record.value) for record in tail.records]


class Ticker:
    """Publishes a worker's ticks every ``every_s``, as the worker's Faust timer will."""

    def __init__(self, bootstrap: str, topic: str, every_s: float = TICK_S) -> None:
        self._source = TickSource("en_de", "test-worker", now_ms, topic)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            topic, key, value = self._source.record()
            self._producer.send(topic, key=key, value=value)
            self._producer.flush()

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.close()


def _fresh_topics(stack: Endpoints) -> Iterator[dict[str, str]]:
    run = uuid.uuid4().hex[:8]
    names = {
        "results": (f"test.sla.{run}.results", 4),
        "ticks": (f"test.sla.{run}.ticks", 1),
        "windows": (f"test.sla.{run}.windows", 1),
        "late": (f"test.sla.{run}.late", 1),
    }
    ensure_topics(stack.settings.kafka, {n: TopicSpec(p) for n, p in names.values()})
    yield {role: name for role, (name, _) in names.items()}
    admin = admin_client(stack.settings.kafka, "tests")
    admin.delete_topics([name for name, _ in names.values()])
    admin.close()


@pytest.fixture(scope="module")
def topics(stack: Endpoints) -> Iterator[dict[str, str]]:
    yield from _fresh_topics(stack)


@pytest.fixture
def idle_topics(stack: Endpoints) -> Iterator[dict[str, str]]:
    yield from _fresh_topics(stack)


def last_commit(checkpoint: Path) -> int:
    """The id of the checkpoint's last committed batch (-1 before the first)."""
    commits = checkpoint / "commits"
    return max((int(p.name) for p in commits.glob("*") if p.name.isdigit()), default=-1)


def forget_last_commit(checkpoint: Path) -> int:
    """Drop the checkpoint's last commit, as if the job died just before writing it."""
    commits = checkpoint / "commits"
    last = last_commit(checkpoint)
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def job_args(topics: dict[str, str], work: Path) -> list[str]:
    return [
        "--source-topic",
        topics["results"],
        "--sink-topic",
        topics["windows"],
        "--checkpoint",
        str(work / "ck"),
        "--history",
        str(work / "history"),
        "--window",
        "1s",
        "--watermark",
        f"{LATENESS_S}s",
        "--trigger",
        f"{TRIGGER_S}s",
        "--sinks",
        "kafka,parquet,console",
        "--threshold",
        f"en_de={THRESHOLDS['en_de']}",
    ]


def job_env(bootstrap: str, topics: dict[str, str], work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "BABELSTREAM_SLA__TICKS_TOPIC": topics["ticks"],
        "BABELSTREAM_SLA__LATE_TOPIC": topics["late"],
        "BABELSTREAM_SLA__LATE_HISTORY_DIR": str(work / "late"),
        "BABELSTREAM_SLA__BULK_THRESHOLD_MS": str(BULK_THRESHOLD),
        "BABELSTREAM_SLA__OBJECTIVES": '{"p95_ms": 2000, "timeout_ratio": 0.2, '
        '"p99_ms": null, "error_ratio": null}',
        "BABELSTREAM_SLA__BULK_OBJECTIVES": '{"timeout_ratio": 0.5, "error_ratio": null}',
    }


def run_realtime(
    job: JobProcess, bootstrap: str, topics: dict[str, str], tail: TopicTail, rng: Random
) -> tuple[list[Event], dict[int, int]]:
    """Phase 3: a few seconds of real-time traffic for en_de, then ticks only."""
    job.wait_for(lambda: len(job.batches()) > 0, "the second run's first batch")
    with Ticker(bootstrap, topics["ticks"]):
        events = []
        for i in range(12):
            events.append(
                Event(f"rt-{i}", "en_de", 0.0, 50 + 10 * i, "ok", "miss", absolute_ms=now_ms())
            )
            _send(bootstrap, topics["results"], _results(events[-1:]))
            time.sleep(0.25)
        last_window = max(e.window_start for e in events)
        emitted: dict[int, int] = {}

        def last_window_out() -> bool:
            tail.read_until(lambda _: False, timeout_s=0.3)
            for record in tail.records:
                window = SlaWindow.from_json(record.value)
                if window.window_start >= events[0].window_start:
                    emitted[window.window_start] = record.timestamp
            return last_window in emitted

        job.wait_for(last_window_out, "the quiet pair's last window", timeout_s=300)
    return events, emitted


@pytest.fixture(scope="module")
def scenario(
    stack: Endpoints, topics: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scenario]:
    work = tmp_path_factory.mktemp("sla")
    bootstrap = stack.bootstrap_servers
    env = job_env(bootstrap, topics, work)
    rng = Random(20240607)
    phases = Phases.make(rng)
    tail = TopicTail(bootstrap, topics["windows"])
    late_tail = TopicTail(bootstrap, topics["late"])
    closing = [
        TickSource(
            "en_de", "test-worker", lambda: BASE + round(CLOSING_TICK_S * 1000), topics["ticks"]
        ).record()
    ]
    jobs: list[JobProcess] = []
    expected_windows = len({(*e.series, e.window_start) for e in phases.originals})
    started = time.monotonic()
    try:
        _send(bootstrap, topics["results"], _results(phases.stream))
        _send(bootstrap, topics["ticks"], [(key, value) for _, key, value in closing])
        _stage(started, f"{len(phases.stream)} results sent; first run starting")
        jobs.append(first := JobProcess(job_args(topics, work), env))
        # the first batch pays for the JVM's warm-up: minutes on a loaded 2-core machine
        first.wait_for(
            lambda: len(_windows(tail)) >= expected_windows, "the windows", timeout_s=900
        )
        _stage(started, f"windows out; batches {first.batches()}")
        listening = listening_addresses(first.proc.pid)
        _send(bootstrap, topics["results"], _results(phases.late))
        late_tail.read_until(lambda records: len(records) >= len(phases.late), timeout_s=300)
        _stage(started, f"{len(late_tail.records)} late rows out")
        first.wait_for(
            lambda: last_commit(work / "ck") >= max(batch for batch, _, _ in first.batches()),
            "the late rows' batch committed",
        )
        first.stop()
        replayed = forget_last_commit(work / "ck")
        _stage(started, f"first run stopped, batch {replayed} forgotten; second run starting")
        jobs.append(second := JobProcess(job_args(topics, work), env))
        realtime, emitted = run_realtime(second, bootstrap, topics, tail, rng)
        _stage(started, f"quiet pair's windows out; batches {second.batches()}")
        # Ctrl-C: PySpark's context sets a SIGINT handler of its own as it starts
        second.stop(signal.SIGINT)
        assert run_state(work / "ck").detail.startswith("stopped at "), "status: stopped"
        tail.drain(quiet_s=2.0)
        late_tail.drain(quiet_s=1.0)
    finally:
        for job in jobs:
            job.kill()
        tail.close()
        late_tail.close()
    yield Scenario(
        phases=phases,
        windows=[SlaWindow.from_json(r.value) for r in tail.records],
        keys=[r.key for r in tail.records],
        late=[LateResult.from_json(r.value) for r in late_tail.records],
        console=first.stdout + second.stdout,
        history=work / "history",
        late_history=work / "late",
        replayed_batch=replayed,
        second_run_writes=second.sink_writes(),
        listening=listening,
        realtime=realtime,
        realtime_emitted_ms=emitted,
        # the realtime phase starts after the run's first (warm-up, replay) batch
        max_batch_ms=max(ms for _, _, ms in second.batches()[1:]),
    )


Key = tuple[str, str, int]


def _key(window: SlaWindow) -> Key:
    return window.pair, window.priority, window.window_start


def expected_by_window(events: list[Event]) -> dict[Key, list[Event]]:
    windows: dict[Key, list[Event]] = {}
    for event in events:
        windows.setdefault((*event.series, event.window_start), []).append(event)
    return windows


def phase1(scenario: Scenario) -> dict[Key, SlaWindow]:
    return {_key(w): w for w in scenario.windows if w.window_start < BASE + 2_000_000}


def test_every_window_once_and_series_apart(scenario: Scenario) -> None:
    emitted = Counter(_key(w) for w in scenario.windows)
    assert [key for key, n in emitted.items() if n > 1] == []
    expected = expected_by_window(scenario.phases.originals)
    assert set(phase1(scenario)) == set(expected)
    assert {key[:2] for key in expected} == {
        ("en_de", "interactive"),
        ("de_en", "interactive"),
        ("en_de", "bulk"),
        ("unsupported", "interactive"),
    }
    assert len([k for k in expected if k[:2] == ("en_de", "interactive")]) == 1000
    assert scenario.keys == [w.pair.encode() for w in scenario.windows]


def test_repeats_change_no_count_ratio_or_percentile(scenario: Scenario) -> None:
    """The stream with 20 % repeats gives the figures of the stream without them."""
    expected = expected_by_window(scenario.phases.originals)
    repeats = Counter((*e.series, e.window_start) for e in scenario.phases.copies)
    assert sum(repeats.values()) > 0.15 * len(scenario.phases.originals)
    for key, window in phase1(scenario).items():
        events = expected[key]
        n = len(events)
        assert window.count == n, key
        assert window.duplicates == repeats.get(key, 0), key
        assert window.timeout_ratio == sum(e.timed_out for e in events) / n, key
        for status, ratio in (
            ("error", window.error_ratio),
            ("cancelled", window.cancel_ratio),
            ("rejected", window.rejected_ratio),
        ):
            assert ratio == sum(e.status == status for e in events) / n, (key, status)
        assert (
            window.cache_hit_ratio == sum(e.cache in ("l1", "l2", "window") for e in events) / n
        ), key
        latencies = [e.latency_ms for e in events]
        for p, value in ((0.5, window.p50_ms), (0.95, window.p95_ms), (0.99, window.p99_ms)):
            low, high = percentile_bounds(latencies, p, ACCURACY)
            assert low <= value <= high, (key, p, value, low, high)


def test_objectives_and_burn_rates_by_hand(scenario: Scenario) -> None:
    expected = expected_by_window(scenario.phases.originals)
    windows = phase1(scenario)
    for series in {key[:2] for key in windows}:
        objectives = BULK_OBJECTIVE if series[1] == "bulk" else OBJECTIVE
        count = timeouts = 0
        for key in sorted(k for k in windows if k[:2] == series):
            window, events = windows[key], expected[key]
            count += len(events)  # every window of the scenario lies within the last hour
            timeouts += sum(e.timed_out for e in events)
            assert window.objectives == objectives, key
            met = {"timeout_ratio": window.timeout_ratio <= objectives["timeout_ratio"]}
            if "p95_ms" in objectives:
                met["p95_ms"] = window.p95_ms <= objectives["p95_ms"]
            assert window.met == met, key
            burn = timeouts / count / objectives["timeout_ratio"]
            assert window.burn_rate_1h == pytest.approx(burn, rel=1e-12), key
            assert window.burn_rate_6h == pytest.approx(burn, rel=1e-12), key
    assert any(not w.met["timeout_ratio"] for w in windows.values())
    assert any(w.met["timeout_ratio"] for w in windows.values())


def test_report_over_1000_windows_agrees_with_numpy(scenario: Scenario) -> None:
    result = CliRunner().invoke(
        main,
        [
            "sla",
            "report",
            "--pair",
            "en_de",
            "--from",
            str(BASE),
            "--to",
            str(BASE + 1_000_000),
            "--history",
            str(scenario.history),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    report = json.loads(result.output)
    events = [e for e in scenario.phases.originals if e.series == ("en_de", "interactive")]
    assert (report["windows"], report["count"]) == (1000, len(events))
    latencies = np.sort([e.latency_ms for e in events])
    error = report["rank_error"]
    assert 0 < error < 0.02
    for name, p in (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)):
        low = np.quantile(latencies, max(p - error, 0), method="inverted_cdf")
        high = np.quantile(latencies, min(p + error, 1), method="inverted_cdf")
        assert low <= report[name] <= high, (name, report[name], low, high)
    assert report["timeout_ratio"] == sum(e.timed_out for e in events) / len(events)
    assert report["duplicates"] == sum(
        c.series == ("en_de", "interactive") and c.window_start < BASE + 1_000_000
        for c in scenario.phases.copies
    )


def test_late_rows_land_on_the_late_topic(scenario: Scenario) -> None:
    late = scenario.late
    assert sorted(r.request_id for r in late) == sorted(e.request_id for e in scenario.phases.late)
    for row in late:
        assert row.window_end == row.window_start + WINDOW_MS
        assert row.window_end <= row.watermark, "its window had closed"
        assert row.late_by_ms == row.watermark - row.completed_at
        assert (row.pair, row.priority) == ("en_de", "interactive")
    history = read_late_history(scenario.late_history)
    assert sorted(history) == sorted(r.request_id for r in late)
    # the windows themselves did not change
    expected = expected_by_window(scenario.phases.originals)
    assert all(w.count == len(expected[k]) for k, w in phase1(scenario).items())


def read_late_history(folder: Path) -> list[str]:
    import pyarrow.dataset as ds

    return ds.dataset(str(folder)).to_table(columns=["request_id"]).column("request_id").to_pylist()


def test_a_quiet_pairs_last_window_closes_within_the_bound(scenario: Scenario) -> None:
    """Ticks alone close it within lateness + tick interval + 2 triggers + 3 batch run times
    (the batch running when the tick arrives, the one reading it, the one emitting)."""
    bound_ms = (LATENESS_S + TICK_S + 2 * TRIGGER_S) * 1000 + 3 * scenario.max_batch_ms
    last = max(e.window_start for e in scenario.realtime)
    delay = scenario.realtime_emitted_ms[last] - (last + WINDOW_MS)
    assert 0 < delay <= bound_ms, (delay, bound_ms)
    by_window = Counter(e.window_start for e in scenario.realtime)
    realtime = {w.window_start: w for w in scenario.windows if w.window_start >= min(by_window)}
    assert {start: w.count for start, w in realtime.items()} == dict(by_window)


def test_restart_rewrites_nothing(scenario: Scenario) -> None:
    replays = [w for w in scenario.second_run_writes if w[0] == scenario.replayed_batch]
    assert replays in ([], [(scenario.replayed_batch, "-", "console,kafka,parquet")])


def test_history_and_console_match_kafka(scenario: Scenario) -> None:
    history = {_key(w): (w, sketch) for w, sketch in read_history(scenario.history)}
    assert {k: w for k, (w, _) in history.items()} == {_key(w): w for w in scenario.windows}
    assert all(sketch for _, sketch in history.values())
    lines = [
        line for line in scenario.console if line.startswith(("en_de", "de_en", "unsupported"))
    ]
    assert len(lines) == len(scenario.windows)


def test_the_job_listens_on_loopback_only(scenario: Scenario) -> None:
    assert scenario.listening, "the driver's JVM listens (py4j, RPC, block manager)"
    assert scenario.listening <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, scenario.listening


def test_until_idle_ends_while_a_workers_ticks_flow(
    stack: Endpoints, idle_topics: dict[str, str], tmp_path: Path
) -> None:
    """``sla --until-idle`` stops once no result has arrived for that long, though ticks
    keep coming (here one per trigger, the worst case), and the ticks still close the
    results' windows before it stops."""
    bootstrap = stack.bootstrap_servers
    start = now_ms() - 3000
    events = [
        Event(f"idle-{i}", "en_de", 0.0, 100 + i, "ok", "miss", absolute_ms=start + 100 * i)
        for i in range(20)
    ]
    _send(bootstrap, idle_topics["results"], _results(events))
    args = [*job_args(idle_topics, tmp_path), "--until-idle", "5s", "--sinks", "kafka"]
    tail = TopicTail(bootstrap, idle_topics["windows"])
    try:
        with Ticker(bootstrap, idle_topics["ticks"], every_s=TRIGGER_S):
            job = JobProcess(args, job_env(bootstrap, idle_topics, tmp_path))
            try:
                # a JVM start and a cold first batch, then 5 s of ticks alone
                returncode = job.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                job.kill()
                pytest.fail(f"still running 600 s on, with ticks and no results {job.tail()}")
        tail.drain(quiet_s=2.0)
        windows = [SlaWindow.from_json(r.value) for r in tail.records]
    finally:
        tail.close()
    assert returncode == 0, job.tail()
    assert sum(w.count for w in windows if w.pair == "en_de") == len(events), windows
    summary = [line for line in job.stderr if line.startswith("sla: ")]
    assert summary and summary[-1].startswith(f"sla: {len(events)} results and "), job.tail()
    run = JobRun.read(tmp_path / "ck")  # what the dashboard reads to say why it shows nothing
    assert run is not None and (run.sinks, run.sink_topic) == (("kafka",), idle_topics["windows"])
