"""Interactive latency with and without a bulk job on the same worker.

One worker; interactive requests at a fixed moderate rate, measured twice:
alone, then while a bulk job (``babelstream bulk run`` in its own process)
keeps the worker saturated (its in-flight window always full). Both phases
use fresh tenants, so every request is a cache miss.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.bench.e2e import fresh_requests
from pipeline.bench.load import run_load
from pipeline.bench.report import LoadFigures
from pipeline.bench.target import BenchTarget, wait_drained
from pipeline.bench.workload import bulk_run_command, make_texts
from pipeline.bulk.state import JobState
from pipeline.contract.pairs import bulk_work_topic
from pipeline.errors import EngineError
from pipeline.sample_sentences import SentenceGenerator
from pipeline.settings import Settings
from pipeline.stack.local_worker import WorkerProcess


def make_documents(n: int, seed: int = 11) -> list[str]:
    """``n`` documents of 2-6 generated sentences, some in two paragraphs."""
    rng = random.Random(seed)
    generator = SentenceGenerator(seed, min_words=3, max_words=20)
    docs = []
    for _ in range(n):
        sentences = [generator.sentence() for _ in range(rng.randint(2, 6))]
        cut = rng.randint(1, len(sentences))
        docs.append(
            " ".join(sentences[:cut])
            + ("\n\n" + " ".join(sentences[cut:]) if cut < len(sentences) else "")
        )
    return docs


def interactive(
    settings: Settings, target: BenchTarget, n: int, rate: float, seed: int
) -> LoadFigures:
    """Paced interactive load (each request stamped when it is sent, so latency is real)."""
    requests = fresh_requests(make_texts(n, 0.0, seed=seed), target)
    return LoadFigures.from_summary(
        run_load(settings.kafka, requests, rate=rate).summary(), offered_rps=rate
    )


def drain_bulk(settings: Settings, target: BenchTarget, worker: WorkerProcess) -> None:
    """Until the worker's group has consumed the pair's bulk topic to its end.

    Before the first phase (a backlog an earlier, interrupted run left would
    load the "alone" phase) and after the last (none outlives the bench).
    """
    group = (worker.readiness() or {}).get("group")
    if not group:
        raise EngineError("the bench worker does not say which group it is in")
    left = wait_drained(
        settings.kafka, group, bulk_work_topic(target.entry.model_id), limit_s=600.0
    )
    if left:
        raise EngineError(f"{left} bulk records still waiting after 10 minutes")


class BackgroundBulk:
    """``babelstream bulk run`` in a process of its own, as users run it; stopped on request."""

    def __init__(self, target: BenchTarget, docs: int, max_in_flight: int, work_dir: Path) -> None:
        corpus = work_dir / "bulk-corpus.parquet"
        pq.write_table(pa.table({"text": make_documents(docs)}), corpus)
        job_id = f"bench-{uuid.uuid4().hex[:8]}"
        pair = target.entry.pair
        self.state = JobState(work_dir / "state", job_id)
        self._command = bulk_run_command(
            corpus, pair, work_dir / "bulk-out.parquet", job_id, job_id,
            "--max-in-flight", str(max_in_flight),
        )  # fmt: skip
        self._env = {
            **os.environ,
            **target.env(),
            "BABELSTREAM_BULK__STATE_DIR": str(work_dir / "state"),
        }
        self._log = work_dir / "bulk.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def completed(self) -> int:
        return self.state.progress().completed if self.state.exists() else 0

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, warm_segments: int, timeout_s: float = 300.0) -> None:
        """Start, and return once the worker is busy with it."""
        with self._log.open("wb") as out:
            self._proc = subprocess.Popen(
                self._command, env=self._env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while self.completed() < warm_segments and time.monotonic() < deadline:
            if not self.running:
                tail = self._log.read_text(errors="replace")[-2000:]
                raise EngineError(f"bulk job ended early: {tail}")
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
