"""``babelstream bench interference``: interactive latency with and without a bulk job.

One worker; interactive requests at a fixed moderate rate, measured twice:
alone, then while a bulk job (``bulk run`` in its own process) keeps the
worker saturated (its in-flight window always full). Prints both summaries
and the P99 ratio (the issue's target is at most 2x). Both phases use fresh
tenants, so every request is a cache miss.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.load import run_load
from pipeline.bench.workload import make_texts
from pipeline.bulk.state import JobState
from pipeline.client import (
    RequestOptions,
    build_requests,
)
from pipeline.commands.bench_pipeline import machine_info
from pipeline.demo_model.sentences import SentenceGenerator
from pipeline.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.reachability import require_kafka
from pipeline.settings import Settings


def make_documents(n: int, seed: int = 11) -> list[str]:
    """``n`` documents of 2-6 generated sentences, some in two paragraphs."""
    rng = random.Random(seed)
    generator = SentenceGenerator(seed, min_words=3, max_words=20)
    docs = []
    for _ in range(n):
        sentences = [generator.sentence() for _ in range(rng.randint(2, 6))]
        cut = rng.randint(1, len(sentences))
        docs.append(" ".join(sentences[:cut]) + ("\n\n" + " ".join(sentences[cut:])
                                                 if cut < len(sentences) else ""))
    return docs


def _interactive(settings: Settings, n: int, rate: float, seed: int) -> dict[str, Any]:
    """Paced interactive load (each request stamped when it is sent, so latency is real)."""
    options = RequestOptions(timeout_ms=600_000, tenant=f"bench-i-{uuid.uuid4().hex[:8]}")
    requests = build_requests(make_texts(n, 0.0, seed=seed), DEMO_PAIR, options)
    return run_load(settings.kafka, requests, rate=rate).summary()


def _wait_quiet(worker: WorkerProcess, quiet_s: float = 2.0, limit_s: float = 120.0) -> None:
    """Until the worker's engine stops working (so no bulk backlog outlives the bench)."""
    deadline = time.monotonic() + limit_s
    last, since = worker.stats()["engine_texts"], time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet_s:
        time.sleep(0.5)
        now = worker.stats()["engine_texts"]
        if now != last:
            last, since = now, time.monotonic()


class _BackgroundBulk:
    """``babelstream bulk run`` in a process of its own, as users run it; stopped on request."""

    def __init__(self, docs: int, max_in_flight: int, work_dir: Path) -> None:
        corpus = work_dir / "bulk-corpus.parquet"
        pq.write_table(pa.table({"text": make_documents(docs)}), corpus)
        job_id = f"bench-{uuid.uuid4().hex[:8]}"
        self.state = JobState(work_dir / "state", job_id)
        self._command = [
            sys.executable, "-m", "pipeline", "bulk", "run", str(corpus),
            "--src", DEMO_PAIR.source, "--tgt", DEMO_PAIR.target,
            "--output", str(work_dir / "bulk-out.parquet"), "--job-id", job_id,
            "--tenant", job_id, "--max-in-flight", str(max_in_flight),
        ]
        self._env = {**os.environ, "BABELSTREAM_BULK__STATE_DIR": str(work_dir / "state")}
        self._log = work_dir / "bulk.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def completed(self) -> int:
        return self.state.progress().completed if self.state.exists() else 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, warm_segments: int = 200, timeout_s: float = 120.0) -> None:
        """Start, and return once the worker is busy with it."""
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(self._command, env=self._env, stdout=out,
                                          stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while self.completed() < warm_segments and time.monotonic() < deadline:
            if not self.running:
                raise click.ClickException(
                    f"bulk job ended early: {self._log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        """Interrupt the job (its state says so) and wait for it."""
        if self.running and self._proc is not None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


def measure_interference(
    settings: Settings, n: int, rate: float, bulk_docs: int, max_in_flight: int
) -> dict[str, Any]:
    """Interactive figures alone and under a saturating bulk job (starts and stops a worker)."""
    log_path = settings.stack.home / "log" / "bench-worker.log"
    with WorkerProcess(settings, log_path=log_path) as worker, \
            tempfile.TemporaryDirectory() as tmp:
        alone = _interactive(settings, n, rate, seed=21)
        bulk = _BackgroundBulk(bulk_docs, max_in_flight, Path(tmp))
        try:
            bulk.start()
            before, started = bulk.completed(), time.monotonic()
            loaded = _interactive(settings, n, rate, seed=22)
            during, elapsed = bulk.completed() - before, time.monotonic() - started
            saturated = bulk.running
        finally:
            bulk.close()
        _wait_quiet(worker)
    ratio = loaded["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] else float("nan")
    return {
        "bench": "interference",
        "interactive_rate": rate,
        "interactive_requests": n,
        "p99_alone_ms": alone["p99_ms"],
        "p99_with_bulk_ms": loaded["p99_ms"],
        "p99_ratio": round(ratio, 3),
        "meets_2x_target": ratio <= 2.0,
        "bulk": {
            "segments_during_interactive": during,
            "segments_per_s": round(during / elapsed, 1) if elapsed else 0.0,
            "max_in_flight": max_in_flight,
            "saturated_throughout": saturated,
        },
        "alone": alone,
        "with_bulk": loaded,
        "worker": {"max_messages": settings.worker.max_messages,
                   "max_wait_s": settings.worker.max_wait_s,
                   "bulk_max_messages": settings.worker.bulk_max_messages,
                   "bulk_token_budget": settings.worker.bulk_token_budget},
        "machine": machine_info(),
    }


@click.command()
@click.option("--requests", "n", type=click.IntRange(1), default=300, show_default=True,
              help="Interactive requests per phase.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True,
              help="Interactive requests per second (moderate: well below saturation).")
@click.option("--bulk-docs", type=click.IntRange(1), default=5000, show_default=True,
              help="Documents in the background bulk job (enough to outlast the phase).")
@click.option("--max-in-flight", type=click.IntRange(1), default=500, show_default=True,
              help="The bulk job's in-flight window.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line.")
@click.pass_obj
def interference(settings: Settings, n: int, rate: float, bulk_docs: int, max_in_flight: int,
                 as_json: bool) -> None:
    """Interactive P50/P95/P99 at a fixed rate, alone and with a bulk job saturating the worker."""
    require_kafka(settings.kafka)
    doc = measure_interference(settings, n, rate, bulk_docs, max_in_flight)
    click.echo(json.dumps(doc, indent=None if as_json else 2))
