"""``babelstream bench sla``: the results/s the Spark SLA job sustains on this machine.

Pre-loads synthetic results into a fresh topic, closes their windows with one
later "tick" result per pair, runs the job over the backlog with
``--until-idle`` and reports input rows per second of micro-batch time (the
sum of ``triggerExecution`` over batches with input; ``warm_`` without the
first batch, which pays for JVM warm-up), next to the wall time that
includes the JVM start. ``results_in_windows`` (the sum of the windows'
counts) equals ``results`` unless the job dropped some as too late.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from pipeline.kafka_clients import admin_client, kafka_python_options
from pipeline.messages import SlaWindow
from pipeline.progress import progress_bar
from pipeline.reachability import require_kafka, require_spark_master
from pipeline.settings import Settings
from pipeline.sla import RunSummary
from pipeline.stack.topics import TopicSpec, ensure_topics

_STATUSES = ("ok",) * 17 + ("timeout", "error")
_CACHES = ("miss", "miss", "l1", "l2", "window")
_BASE_MS = 1_700_000_000_000


def bench_pair(index: int) -> str:
    """Pair id number ``index`` (``en_xaa``, ``en_xab``, ...: 3-letter BCP-47 targets)."""
    return f"en_x{chr(97 + index // 26 % 26)}{chr(97 + index % 26)}"


def synthetic_results(count: int, pairs: int, rate: int, seed: int = 7) -> Iterator[bytes]:
    """``count`` TranslationResult JSON documents, ``rate`` per second of event time."""
    rng = random.Random(seed)
    for i in range(count):
        pair = bench_pair(i % pairs)
        completed = _BASE_MS + i * 1000 // rate
        latency = int(rng.lognormvariate(5.5, 0.8))
        yield json.dumps({
            "schema_version": 1, "request_id": f"bench-{i}", "source_lang": "en",
            "target_lang": pair[3:], "pair": pair, "status": rng.choice(_STATUSES),
            "cache": rng.choice(_CACHES), "submitted_at": completed - latency,
            "completed_at": completed, "latency_ms": latency,
        }).encode()


def _tick(pair: str, completed: int) -> bytes:
    return json.dumps({
        "schema_version": 1, "request_id": f"tick-{pair}", "source_lang": "en",
        "target_lang": pair[3:], "pair": pair, "status": "ok", "submitted_at": completed,
        "completed_at": completed, "latency_ms": 0,
    }).encode()


def preload(settings: Settings, topic: str, count: int, pairs: int, rate: int) -> float:
    """Produce the synthetic results and the closing ticks; returns the seconds it took."""
    from kafka import KafkaProducer

    started = time.monotonic()
    # acks=1 without idempotence: synthetic load, speed over delivery guarantees
    producer = KafkaProducer(**kafka_python_options(settings.kafka, "bench-sla"), acks=1,
                             enable_idempotence=False, linger_ms=50, batch_size=512 * 1024)
    with progress_bar("pre-loaded", total=count, unit="result") as bar:
        for value in synthetic_results(count, pairs, rate):
            producer.send(topic, value=value)
            bar.update()
    sla = settings.sla
    closing_ms = int((sla.watermark_s + 2 * sla.window_s) * 1000)
    tick_at = _BASE_MS + count * 1000 // rate + closing_ms
    for i in range(pairs):
        producer.send(topic, value=_tick(bench_pair(i), tick_at))
    producer.flush()
    producer.close()
    return time.monotonic() - started


def _topics(settings: Settings, names: dict[str, int], create: bool) -> None:
    if create:
        ensure_topics(settings.kafka, {name: TopicSpec(n) for name, n in names.items()})
        return
    admin = admin_client(settings.kafka, "bench-sla")
    try:
        admin.delete_topics(list(names))
    finally:
        admin.close()


def read_windows(settings: Settings, topic: str) -> list[SlaWindow]:
    """The SlaWindow messages on ``topic``, each validated against the contract."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, **kafka_python_options(settings.kafka, "bench-sla"),
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        return [SlaWindow.from_json(record.value) for record in consumer]
    finally:
        consumer.close()


def report(settings: Settings, summary: RunSummary, loaded: dict[str, Any]) -> dict[str, Any]:
    """The bench's JSON document."""
    sla = settings.sla
    return {
        "bench": "sla",
        "results_per_s": round(summary.rows_per_busy_s),
        "warm_results_per_s": round(summary.warm_rows_per_busy_s),
        "input_rows": summary.input_rows,
        "input_batches": [[b.rows, b.ms] for b in summary.input_batches],
        "busy_s": round(summary.busy_s, 2),
        "wall_s": round(summary.wall_s, 2),
        "windows": summary.windows,
        **loaded,
        "settings": {
            key: getattr(sla, key) for key in (
                "window_s", "slide_s", "watermark_s", "trigger_s", "max_offsets_per_trigger",
                "percentile_accuracy", "master", "driver_memory", "shuffle_partitions")
        } | {"sinks": list(sla.sinks), "partitions": settings.kafka.results_partitions},
        "cpus": os.cpu_count(),
    }


@click.command()
@click.option("--results", "count", type=click.IntRange(1), default=200_000, show_default=True,
              help="Synthetic results to pre-load.")
@click.option("--pairs", type=click.IntRange(1, 676), default=4, show_default=True,
              help="Synthetic pairs the results are spread over.")
@click.option("--rate", type=click.IntRange(1), default=1000, show_default=True,
              help="Results per second of event time (all pairs together).")
@click.option("--max-offsets-per-trigger", type=click.IntRange(1), default=50_000,
              show_default=True, help="Micro-batch size cap, so the rate is a sustained one.")
@click.option("--json", "as_json", is_flag=True, help="Print only the JSON document.")
@click.pass_obj
def sla(settings: Settings, count: int, pairs: int, rate: int, max_offsets_per_trigger: int,
        as_json: bool) -> None:
    """Results/s the Spark SLA job sustains over a pre-loaded backlog."""
    require_kafka(settings.kafka)
    require_spark_master(settings.sla.master, settings.kafka.connect_timeout_s)
    from jobs.sla import run

    run_id = uuid.uuid4().hex[:8]
    source, sink = f"bench.sla.{run_id}", f"bench.sla.{run_id}.out"
    topics = {source: settings.kafka.results_partitions, sink: 1}
    _topics(settings, topics, create=True)
    try:
        load_s = preload(settings, source, count, pairs, rate)
        with tempfile.TemporaryDirectory(prefix="bench-sla-") as work:
            sla_settings = settings.sla.model_copy(update={
                "source_topic": source, "sink_topic": sink, "sinks": ("kafka", "parquet"),
                "checkpoint_dir": Path(work) / "checkpoint", "history_dir": Path(work) / "history",
                "starting_offsets": "earliest", "max_offsets_per_trigger": max_offsets_per_trigger,
            })
            job_settings = settings.model_copy(update={"sla": sla_settings})
            with progress_bar("aggregated", total=count + pairs, unit="result") as bar:
                summary = run(job_settings, until_idle_s=max(5.0, 4 * sla_settings.trigger_s),
                              on_input=bar.update)
        windows = read_windows(settings, sink)
        loaded = {"results": count, "pairs": pairs, "load_s": round(load_s, 2),
                  "windows_on_topic": len(windows),
                  "results_in_windows": sum(w.count for w in windows)}
    finally:
        _topics(settings, topics, create=False)
    doc = report(job_settings, summary, loaded)
    if not as_json:
        click.echo(f"SLA job: {doc['results_per_s']} results/s over {count} results "
                   f"({doc['warm_results_per_s']}/s after the first batch; "
                   f"{doc['windows']} windows)", err=True)
    click.echo(json.dumps(doc, indent=2))
