"""``babelstream bench sla``: the results/s the Spark SLA job sustains on this machine.

Pre-loads synthetic results (``--duplicates`` of them repeated) into a fresh
topic, then runs the job over the backlog with ``--until-idle`` once per
configuration, on the same input, in one process. Once a run's job has read
every result, one worker tick per pair far later (closing every window) goes
to that run's own ticks topic, as a worker's ticks follow its last results: a
tick pre-loaded with the backlog would be read in the first micro-batch (the
job reads both topics together) and move the watermark past every result not
yet read, turning them into late rows.

- ``full``: the job as it runs (de-duplication, KLL sketches, the late-rows query);
- ``baseline``: without de-duplication, sketches and the late-rows query, i.e.
  what the job computed before them.

Every run shares one JVM, which keeps what it compiled: the first run of a
process pays for the JIT warming up (its first 50,000-row batch took 6.7 s
against 2.7 s for the same configuration later), and the runs after it
profit. So an unmeasured warm-up run of the first configuration comes
first (``--no-warmup`` leaves it out; its figures are reported apart), and
the configurations then run ``--rounds`` times, in the given order in even
rounds and reversed in odd ones, so none always runs first; each figure is
the median over the rounds. Each run reports input rows per second of the
query's micro-batch time (the sum of ``triggerExecution`` over batches with
input; ``warm_`` without the run's first batch, which plans the query and
loads its state), next to the wall time that includes the session start.
``results_in_windows`` (the sum of the windows' counts) equals the unique
results unless the job dropped some as too late.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from pipeline.contract.messages import SlaWindow
from pipeline.kafka.check import admin_client
from pipeline.kafka.clients import kafka_python_options
from pipeline.kafka.reachability import require_kafka, require_spark_master
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.observability.progress import progress_bar
from pipeline.settings import Settings
from pipeline.sla.logic import RunSummary
from pipeline.sla.ticks import TickSource

_STATUSES = ("ok",) * 17 + ("timeout", "error")
_CACHES = ("miss", "miss", "l1", "l2", "window")
_BASE_MS = 1_700_000_000_000


def bench_pair(index: int) -> str:
    """Pair id number ``index`` (``en_xaa``, ``en_xab``, ...: 3-letter BCP-47 targets)."""
    return f"en_x{chr(97 + index // 26 % 26)}{chr(97 + index % 26)}"


def synthetic_results(
    count: int, pairs: int, rate: int, seed: int = 7, duplicates: float = 0.0
) -> Iterator[bytes]:
    """``count`` TranslationResult JSON documents, ``rate`` per second of event time;
    a ``duplicates`` share of them is sent twice (right after the first copy)."""
    rng = random.Random(seed)
    for i in range(count):
        pair = bench_pair(i % pairs)
        completed = _BASE_MS + i * 1000 // rate
        latency = int(rng.lognormvariate(5.5, 0.8))
        document = json.dumps(
            {
                "schema_version": 1,
                "request_id": f"bench-{i}",
                "source_lang": "en",
                "target_lang": pair[3:],
                "pair": pair,
                "status": rng.choice(_STATUSES),
                "cache": rng.choice(_CACHES),
                "submitted_at": completed - latency,
                "completed_at": completed,
                "latency_ms": latency,
            }
        ).encode()
        yield document
        if rng.random() < duplicates:
            yield document


def _producer(settings: Settings) -> Any:
    from kafka import KafkaProducer

    # acks=1 without idempotence: synthetic load, speed over delivery guarantees
    return KafkaProducer(
        **kafka_python_options(settings.kafka, "bench-sla"),
        acks=1,
        enable_idempotence=False,
        linger_ms=50,
        batch_size=512 * 1024,
    )


def preload(
    settings: Settings, topic: str, count: int, pairs: int, rate: int, duplicates: float
) -> tuple[float, int]:
    """Produce the synthetic results; returns (seconds, records sent)."""
    started = time.monotonic()
    producer = _producer(settings)
    sent = 0
    with progress_bar("pre-loaded", total=count, unit="result") as bar:
        for value in synthetic_results(count, pairs, rate, duplicates=duplicates):
            producer.send(topic, value=value)
            sent += 1
            bar.update()
    producer.flush()
    producer.close()
    return time.monotonic() - started, sent


class ClosingTicks:
    """Sends one tick, late enough to close every window, once ``results`` are read.

    ``__call__`` is the job's ``on_input`` (rows of each micro-batch with input).
    """

    def __init__(self, settings: Settings, topic: str, count: int, rate: int, results: int) -> None:
        sla = settings.sla
        closing_ms = int((sla.watermark_s + 2 * sla.window_s) * 1000)
        tick_at = _BASE_MS + count * 1000 // rate + closing_ms
        self._source = TickSource(bench_pair(0), "bench", lambda: tick_at, topic)
        self._settings = settings
        self._results = results
        self._read = 0
        self.sent = False

    def __call__(self, rows: int) -> None:
        self._read += rows
        if self.sent or self._read < self._results:
            return
        producer = _producer(self._settings)
        topic, key, value = self._source.record()
        producer.send(topic, key=key, value=value)
        producer.flush()
        producer.close()
        self.sent = True


def _delete_topics(settings: Settings, names: list[str]) -> None:
    admin = admin_client(settings.kafka, "bench-sla")
    try:
        admin.delete_topics(names)
    finally:
        admin.close()


def read_windows(settings: Settings, topic: str) -> list[SlaWindow]:
    """The SlaWindow messages on ``topic``, each validated against the contract."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        **kafka_python_options(settings.kafka, "bench-sla"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        isolation_level="read_committed",  # the SLA job writes in transactions
    )
    try:
        return [SlaWindow.from_json(record.value) for record in consumer]
    finally:
        consumer.close()


# name -> (SlaSettings overrides, run the late-rows query); the "without_" ones price one
# feature each (opt-in with --config)
CONFIGS: dict[str, tuple[dict[str, Any], bool]] = {
    "full": ({}, True),
    "baseline": ({"dedup": False, "sketch_k": None}, False),
    "without_late": ({}, False),
    "without_dedup": ({"dedup": False}, True),
    "without_sketch": ({"sketch_k": None}, True),
}
DEFAULT_CONFIGS = ("full", "baseline")
# every run writes where the dashboard and `sla report` read (no console)
RUN_SINKS = ("kafka", "parquet")


def run_report(settings: Settings, summary: RunSummary, windows: list[SlaWindow]) -> dict[str, Any]:
    """One configuration's figures."""
    return {
        "results_per_s": round(summary.rows_per_busy_s),
        "warm_results_per_s": round(summary.warm_rows_per_busy_s),
        "input_rows": summary.input_rows,
        "input_batches": [[b.rows, b.ms] for b in summary.input_batches],
        "busy_s": round(summary.busy_s, 2),
        "wall_s": round(summary.wall_s, 2),
        "windows": summary.windows,
        "windows_on_topic": len(windows),
        "results_in_windows": sum(w.count for w in windows),
        "duplicates_in_windows": sum(w.duplicates for w in windows),
        "late_rows": summary.late_rows,
        "dedup": settings.sla.dedup,
        "sketch_k": settings.sla.sketch_k,
    }


def run_order(configs: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """``(round, configuration)`` in the order they run: reversed in every odd round."""
    return [
        (index, name)
        for index in range(rounds)
        for name in (configs if index % 2 == 0 else list(reversed(configs)))
    ]


_RATES = ("results_per_s", "warm_results_per_s")
_DURATIONS = ("busy_s", "wall_s")


def combine_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's figures over its rounds: the medians, and each round's report."""
    combined = dict(rounds[-1])
    for key in _RATES:
        combined[key] = round(statistics.median(run[key] for run in rounds))
    for key in _DURATIONS:
        combined[key] = round(statistics.median(run[key] for run in rounds), 2)
    combined["rounds"] = list(rounds)
    return combined


def report(
    settings: Settings,
    runs: dict[str, dict[str, Any]],
    loaded: dict[str, Any],
    warmup: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The bench's JSON document: each configuration, and full / baseline."""
    sla = settings.sla
    ratios = {}
    if "full" in runs and "baseline" in runs:
        for key in ("results_per_s", "warm_results_per_s"):
            base = runs["baseline"][key]
            ratios[f"full_vs_baseline_{key}"] = round(runs["full"][key] / base, 3) if base else None
    return {
        "bench": "sla",
        "runs": runs,
        **ratios,
        "warmup": warmup,
        **loaded,
        "settings": {
            key: getattr(sla, key)
            for key in (
                "window_s",
                "slide_s",
                "watermark_s",
                "trigger_s",
                "max_offsets_per_trigger",
                "percentile_accuracy",
                "master",
                "driver_memory",
                "java_options",
                "shuffle_partitions",
                "state_store",
            )
        }
        | {"sinks": list(RUN_SINKS), "partitions": settings.kafka.results_partitions},
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


@click.command()
@click.option(
    "--results",
    "count",
    type=click.IntRange(1),
    default=200_000,
    show_default=True,
    help="Synthetic results to pre-load.",
)
@click.option(
    "--pairs",
    type=click.IntRange(1, 676),
    default=4,
    show_default=True,
    help="Synthetic pairs the results are spread over.",
)
@click.option(
    "--rate",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="Results per second of event time (all pairs together).",
)
@click.option(
    "--duplicates",
    type=click.FloatRange(0, 1),
    default=0.05,
    show_default=True,
    help="Share of results sent twice.",
)
@click.option(
    "--max-offsets-per-trigger",
    type=click.IntRange(1),
    default=50_000,
    show_default=True,
    help="Micro-batch size cap, so the rate is a sustained one.",
)
@click.option(
    "--shuffle-partitions",
    type=click.IntRange(1),
    default=None,
    help="spark.sql.shuffle.partitions [default: sla.shuffle_partitions].",
)
@click.option(
    "--state-store",
    type=click.Choice(["hdfs", "rocksdb"]),
    default=None,
    help="State store provider [default: sla.state_store].",
)
@click.option(
    "--config",
    "configs",
    type=click.Choice(list(CONFIGS)),
    multiple=True,
    help="Configurations to run, in this order (default: full, then baseline).",
)
@click.option(
    "--rounds",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Runs of every configuration, alternating their order; figures are medians.",
)
@click.option(
    "--warmup/--no-warmup",
    default=True,
    show_default=True,
    help="An unmeasured run of the first configuration first, so none pays the JIT's warm-up.",
)
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON document.")
@click.pass_obj
def sla(
    settings: Settings,
    count: int,
    pairs: int,
    rate: int,
    duplicates: float,
    max_offsets_per_trigger: int,
    shuffle_partitions: int | None,
    state_store: str | None,
    configs: tuple[str, ...],
    rounds: int,
    warmup: bool,
    as_json: bool,
) -> None:
    """Results/s the Spark SLA job sustains over a pre-loaded backlog, before/after dedup."""
    require_kafka(settings.kafka)
    require_spark_master(settings.sla.master, settings.kafka.connect_timeout_s)
    run_id = uuid.uuid4().hex[:8]
    results_topic = f"bench.sla.{run_id}"
    names = list(dict.fromkeys(configs or DEFAULT_CONFIGS))
    # (label, configuration): the warm-up, then every configuration once per round
    plan = [("warmup", names[0])] if warmup else []
    plan += [(f"{name}.{index}", name) for index, name in run_order(names, rounds)]
    sinks = {label: f"bench.sla.{run_id}.{label.replace('_', '-')}" for label, _ in plan}
    created = [
        results_topic,
        *(f"{sink}{suffix}" for sink in sinks.values() for suffix in ("", ".late", ".ticks")),
    ]
    ensure_topics(
        settings.kafka,
        {
            name: TopicSpec(settings.kafka.results_partitions if name == results_topic else 1)
            for name in created
        },
    )
    # what every run sets on top of the settings (the report's settings block says them too)
    knobs: dict[str, Any] = {"max_offsets_per_trigger": max_offsets_per_trigger} | {
        key: value
        for key, value in (("shuffle_partitions", shuffle_partitions), ("state_store", state_store))
        if value is not None
    }
    measured: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    warmup_run: dict[str, Any] | None = None
    try:
        load_s, sent = preload(settings, results_topic, count, pairs, rate, duplicates)
        backlog = Backlog(results_topic, count, pairs, rate, sent)
        for label, name in plan:
            figures = _run_once(settings, backlog, sinks[label], name, knobs)
            if label == "warmup":
                warmup_run = {"config": name, **figures}
            else:
                measured[name].append(figures)
    finally:
        _delete_topics(settings, created)
    runs = {name: combine_rounds(measured[name]) for name in names}
    loaded = {
        "results": count,
        "records_sent": sent,
        "duplicates": duplicates,
        "pairs": pairs,
        "load_s": round(load_s, 2),
        "rounds": rounds,
    }
    doc = report(
        settings.model_copy(update={"sla": settings.sla.model_copy(update=knobs)}),
        runs,
        loaded,
        warmup_run,
    )
    if not as_json:
        for name, figures in runs.items():
            click.echo(
                f"SLA job ({name}, median of {rounds}): {figures['results_per_s']} results/s, "
                f"{figures['warm_results_per_s']}/s after the first batch, "
                f"{figures['windows']} windows",
                err=True,
            )
    click.echo(json.dumps(doc, indent=2))


@dataclass(frozen=True)
class Backlog:
    """The pre-loaded results every run reads."""

    topic: str
    count: int
    pairs: int
    rate: int
    sent: int


def _run_once(
    settings: Settings, backlog: Backlog, sink: str, name: str, knobs: dict[str, Any]
) -> dict[str, Any]:
    """One run of the job over the backlog, in configuration ``name`` with ``knobs``."""
    from jobs.sla import run

    overrides, late_rows = CONFIGS[name]
    ticks = ClosingTicks(settings, f"{sink}.ticks", backlog.count, backlog.rate, backlog.sent)
    with tempfile.TemporaryDirectory(prefix="bench-sla-") as work:
        sla_settings = settings.sla.model_copy(
            update={
                "source_topic": backlog.topic,
                "ticks_topic": f"{sink}.ticks",
                "sink_topic": sink,
                "late_topic": f"{sink}.late",
                "sinks": RUN_SINKS,
                "checkpoint_dir": Path(work) / "checkpoint",
                "history_dir": Path(work) / "history",
                "late_history_dir": Path(work) / "late",
                "starting_offsets": "earliest",
                **knobs,
                **overrides,
            }
        )
        job_settings = settings.model_copy(update={"sla": sla_settings})
        with progress_bar(
            f"aggregated ({name})", total=backlog.sent + backlog.pairs, unit="result"
        ) as bar:

            def on_input(rows: int) -> None:
                bar.update(rows)
                ticks(rows)

            summary = run(
                job_settings,
                until_idle_s=max(5.0, 4 * sla_settings.trigger_s),
                late_rows=late_rows,
                on_input=on_input,
            )
    figures = run_report(job_settings, summary, read_windows(settings, sink))
    figures["closing_ticks_sent"] = ticks.sent
    return figures
