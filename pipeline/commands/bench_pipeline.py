"""``babelstream bench e2e | naive | compare``: the pipeline against the naive baseline."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from pipeline.bench.load import run_load
from pipeline.bench.naive import NAIVE_TOPIC
from pipeline.bench.workload import make_texts
from pipeline.client import RequestOptions, build_requests
from pipeline.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.messages import TranslationRequest
from pipeline.reachability import require_kafka
from pipeline.settings import Settings
from pipeline.stack.topics import TopicSpec, ensure_topics


def _options(f):  # type: ignore[no-untyped-def]
    for option in reversed([
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
        click.option("--requests", "n", type=click.IntRange(1), default=2000, show_default=True,
                     help="Generated requests."),
        click.option("--repeat-ratio", type=click.FloatRange(0.0, 1.0), default=0.3,
                     show_default=True, help="Share of requests that repeat an earlier text."),
        click.option("--rate", type=float, default=None,
                     help="Requests per second (default: all at once = saturation)."),
    ]):
        f = option(f)
    return f


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version()}


def _requests(n: int, repeat_ratio: float) -> list[TranslationRequest]:
    # A fresh tenant per run: earlier runs' cache entries cannot answer this one.
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    texts = make_texts(n, repeat_ratio)
    return build_requests(texts, DEMO_PAIR, RequestOptions(timeout_ms=600_000, tenant=tenant))


def _settings_used(settings: Settings, n: int, repeat_ratio: float, rate: float | None) -> dict:
    e, w = settings.engine, settings.worker
    return {
        "requests": n, "repeat_ratio": repeat_ratio, "rate": rate, "pair": DEMO_PAIR.id,
        "engine": {"device": e.device, "compute_type": e.compute_type,
                   "inter_threads": e.inter_threads, "intra_threads": e.intra_threads,
                   "beam_size": e.beam_size},
        "worker": {"max_messages": w.max_messages, "max_wait_s": w.max_wait_s,
                   "token_budget": w.token_budget},
    }


def measure_e2e(settings: Settings, n: int, repeat_ratio: float, rate: float | None) -> dict:
    """Start a worker, run the load through the whole pipeline, stop the worker."""
    log_path = settings.stack.home / "log" / "bench-worker.log"
    with WorkerProcess(settings, log_path=log_path) as worker:
        before = worker.stats()
        report = run_load(settings.kafka, _requests(n, repeat_ratio), rate=rate)
        after = worker.stats()
    sizes = {k: v - before["engine_batch_sizes"].get(k, 0)
             for k, v in after["engine_batch_sizes"].items()}
    takes = {k: v - before["take_sizes"].get(k, 0) for k, v in after["take_sizes"].items()}
    texts = after["engine_texts"] - before["engine_texts"]
    padded = after["padding_ratio"] * after["engine_texts"] - (
        before["padding_ratio"] * before["engine_texts"])
    return {
        "bench": "e2e",
        **report.summary(),
        "padding_ratio": round(padded / texts, 4) if texts else 0.0,
        "engine_texts": texts,
        "engine_batch_sizes": {k: v for k, v in sizes.items() if v},
        "take_sizes": {k: v for k, v in takes.items() if v},
        "settings": _settings_used(settings, n, repeat_ratio, rate),
        "machine": machine_info(),
    }


@contextmanager
def _naive_process(settings: Settings) -> Iterator[None]:
    group = f"bench-naive-{uuid.uuid4().hex[:8]}"
    # Same partition count as a pair topic, created up front (not by auto-create).
    ensure_topics(settings.kafka, {NAIVE_TOPIC: TopicSpec(settings.kafka.pair_partitions)})
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.bench.naive", "--group", group])
    try:
        # Warm-up: model loaded and partitions assigned before the clock starts.
        warm = run_load(settings.kafka, _requests(1, 0.0), topic=NAIVE_TOPIC, timeout_s=120)
        if warm.replies.missing:
            raise click.ClickException("naive consumer did not answer its warm-up request")
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def measure_naive(settings: Settings, n: int, repeat_ratio: float, rate: float | None) -> dict:
    """One-at-a-time consumer on the same requests and model."""
    with _naive_process(settings):
        report = run_load(settings.kafka, _requests(n, repeat_ratio), rate=rate,
                          topic=NAIVE_TOPIC)
    summary = report.summary()
    return {
        "bench": "naive", **summary, "padding_ratio": 0.0,
        "engine_batch_sizes": {"1": summary["results"]},
        "settings": _settings_used(settings, n, repeat_ratio, rate), "machine": machine_info(),
    }


def _emit(doc: dict, as_json: bool) -> None:
    click.echo(json.dumps(doc, indent=None if as_json else 2))


@click.command()
@_options
@click.pass_obj
def e2e(settings: Settings, as_json: bool, n: int, repeat_ratio: float,
        rate: float | None) -> None:
    """Whole pipeline: router, micro-batching, dedup, caches (starts and stops a worker)."""
    require_kafka(settings.kafka)
    _emit(measure_e2e(settings, n, repeat_ratio, rate), as_json)


@click.command()
@_options
@click.pass_obj
def naive(settings: Settings, as_json: bool, n: int, repeat_ratio: float,
          rate: float | None) -> None:
    """Baseline: a plain kafka-python consumer translating and committing one at a time."""
    require_kafka(settings.kafka)
    _emit(measure_naive(settings, n, repeat_ratio, rate), as_json)


@click.command()
@_options
@click.pass_obj
def compare(settings: Settings, as_json: bool, n: int, repeat_ratio: float,
            rate: float | None) -> None:
    """Both, on the same workload, side by side, with e2e/naive ratios."""
    require_kafka(settings.kafka)
    pipeline = measure_e2e(settings, n, repeat_ratio, rate)
    baseline = measure_naive(settings, n, repeat_ratio, rate)
    ratio = pipeline["throughput_rps"] / baseline["throughput_rps"]
    _emit({
        "bench": "compare",
        "throughput_ratio": round(ratio, 2),
        "p99_ratio": round(pipeline["p99_ms"] / baseline["p99_ms"], 3),
        "meets_5x_target": ratio >= 5.0,
        "e2e": pipeline,
        "naive": baseline,
    }, as_json)
