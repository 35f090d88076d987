"""Account for every acknowledged request id: results, duplicates, losses, commits."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Self

import numpy as np
from kafka import KafkaConsumer, TopicPartition
from pydantic import ValidationError

from pipeline.contract.messages import TranslationResult, now_ms
from pipeline.contract.pairs import RESULTS_TOPIC
from pipeline.kafka.check import admin_client
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import KafkaSettings


class TopicFollower:
    """Reads a topic from its end *now* on, in a background thread, until :meth:`close`.

    Positions are fixed at construction, before any traffic, so records that
    arrive late or twice are all seen. Subclasses keep what they need in
    :meth:`take` (called under ``self._lock``).
    """

    def __init__(self, kafka: KafkaSettings, topic: str, role: str) -> None:
        self._consumer = KafkaConsumer(
            **kafka_python_options(kafka, role),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",  # the SLA job writes in transactions
        )
        partitions = self._consumer.partitions_for_topic(topic) or set()
        if not partitions:
            self._consumer.close()
            raise RuntimeError(f"topic {topic} does not exist (is the stack up?)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)
        self._consumer.seek_to_end(*tps)
        for tp in tps:
            self._consumer.position(tp)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"drill-{role}", daemon=True)
        self._thread.start()

    def take(self, value: bytes) -> None:
        """Keep what matters of one record's value."""
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=200).values():
                with self._lock:
                    for record in records:
                        self.take(record.value)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ResultTally(TopicFollower):
    """Every result whose request id starts with ``marker`` (``""``: every result)."""

    def __init__(self, kafka: KafkaSettings, marker: str, topic: str = RESULTS_TOPIC) -> None:
        self._marker = marker
        self.results: dict[str, list[TranslationResult]] = defaultdict(list)
        # local receive time (epoch ms) of each id's first result
        self.first_seen_ms: dict[str, int] = {}
        super().__init__(kafka, topic, "drill-results")

    def take(self, value: bytes) -> None:
        try:
            result = TranslationResult.from_json(value)
        except ValidationError:
            return
        if result.request_id.startswith(self._marker):
            self.results[result.request_id].append(result)
            self.first_seen_ms.setdefault(result.request_id, now_ms())

    def wait_for(self, ids: Iterable[str], timeout_s: float) -> bool:
        """Block until each id has a result, or the timeout; True when all arrived."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if wanted <= self.results.keys():
                    return True
            time.sleep(0.2)
        return False

    def snapshot(self) -> dict[str, list[TranslationResult]]:
        with self._lock:
            return {rid: list(results) for rid, results in self.results.items()}

    def first_seen(self) -> dict[str, int]:
        """Request id -> when its first result was read (epoch ms)."""
        with self._lock:
            return dict(self.first_seen_ms)


# duplicated ids whose results a reconciliation lists in full
SAMPLES = 5


@dataclass(frozen=True)
class Reconciliation:
    """What became of the acknowledged requests of one drill."""

    acked: int
    answered: int
    missing: list[str]
    duplicates: int
    statuses: dict[str, int]
    error_results: int
    p50_ms: float
    p99_ms: float
    # P99 of requests sent while the fault was active (None: no fault window given,
    # or nothing was sent in it)
    p99_during_fault_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # results per duplicated id -> how many ids got that many (2: one duplicate)
    duplicate_copies: dict[int, int] = field(default_factory=dict)
    # worker (result.worker) -> copies it wrote after an id's first result
    duplicates_by_worker: dict[str, int] = field(default_factory=dict)
    # a few duplicated ids: [worker, completed_at, cache level] of each result, in order
    duplicate_samples: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["missing"] = len(self.missing)
        data["missing_ids"] = self.missing[:20]
        return data


def reconcile(
    acked: Mapping[str, int],
    results: Mapping[str, list[TranslationResult]],
    fault_window_ms: tuple[int, int] | None = None,
) -> Reconciliation:
    """Join acknowledged ids (id -> send time) with their results."""
    answered = [rid for rid in acked if rid in results]
    firsts = [results[rid][0] for rid in answered]
    latencies = np.array([r.latency_ms for r in firsts], dtype=float)
    during: float | None = None
    if fault_window_ms is not None:
        start, end = fault_window_ms
        hit = [r.latency_ms for r in firsts if start <= acked[r.request_id] <= end]
        during = _percentile(np.array(hit, dtype=float), 99) if hit else None
    all_results = [r for rid in answered for r in results[rid]]
    duplicated = [results[rid] for rid in answered if len(results[rid]) > 1]
    return Reconciliation(
        acked=len(acked),
        answered=len(answered),
        missing=sorted(rid for rid in acked if rid not in results),
        duplicates=len(all_results) - len(answered),
        statuses=dict(Counter(r.status for r in firsts)),
        error_results=sum(r.status == "error" for r in all_results),
        p50_ms=_percentile(latencies, 50),
        p99_ms=_percentile(latencies, 99),
        p99_during_fault_ms=during,
        duplicate_copies=dict(sorted(Counter(len(copies) for copies in duplicated).items())),
        duplicates_by_worker=dict(
            Counter(str(r.worker) for copies in duplicated for r in copies[1:])
        ),
        duplicate_samples={
            copies[0].request_id: [(str(r.worker), r.completed_at, str(r.cache)) for r in copies]
            for copies in duplicated[:SAMPLES]
        },
    )


def _percentile(values: np.ndarray, q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if len(values) else float("nan")


def committed_lag(kafka: KafkaSettings, group: str, topics: Iterable[str]) -> dict[str, int]:
    """Per topic, records not yet committed by ``group`` (log end - committed offset).

    A partition the group never committed counts from the log start.
    """
    admin = admin_client(kafka, "drill-lag")
    consumer = KafkaConsumer(
        **kafka_python_options(kafka, "drill-lag"), group_id=None, enable_auto_commit=False
    )
    try:
        committed = {
            (tp.topic, tp.partition): meta.offset
            for tp, meta in admin.list_group_offsets({group: None})[group].items()
        }
        lag: dict[str, int] = {}
        for topic in topics:
            tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
            ends = consumer.end_offsets(tps)
            starts = consumer.beginning_offsets(tps)
            lag[topic] = sum(
                ends[tp] - max(committed.get((tp.topic, tp.partition), -1), starts[tp])
                for tp in tps
            )
        return lag
    finally:
        consumer.close()
        admin.close()


def wait_committed(
    kafka: KafkaSettings, group: str, topics: Iterable[str], timeout_s: float
) -> dict[str, int]:
    """Poll :func:`committed_lag` until it is zero everywhere or ``timeout_s``; the last lag."""
    topics = list(topics)
    deadline = time.monotonic() + timeout_s
    lag = committed_lag(kafka, group, topics)
    while any(lag.values()) and time.monotonic() < deadline:
        time.sleep(1)
        lag = committed_lag(kafka, group, topics)
    return lag
