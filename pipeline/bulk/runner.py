"""Running a bulk job: plan, publish with flow control, collect, assemble, write.

At most ``bulk.max_in_flight`` segments are published and unanswered at any
time, so the bulk topic's backlog and this process's memory stay bounded
however large the corpus is. Results are appended to the job state as they
arrive; a rerun of the same job publishes only the segments without an ``ok``
result. Results of an earlier run that arrive late are used too.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from pipeline.bulk import BulkError, BulkInterrupted
from pipeline.bulk.assemble import SegmentOutcome, assemble_table, check_output_columns
from pipeline.bulk.plan import JobPlan, SegmentTask, build_plan
from pipeline.bulk.readers import Corpus
from pipeline.bulk.requests import RequestTemplate, job_identity
from pipeline.bulk.state import JobState, result_record
from pipeline.bulk.transport import BulkPublisher, JobResults
from pipeline.engine.registry import Registry
from pipeline.messages import now_ms
from pipeline.pairs import Pair, bulk_topic
from pipeline.progress import progress_bar
from pipeline.settings import Settings

log = logging.getLogger(__name__)

NO_RESULT_HINT_S = 30.0


@dataclass(frozen=True)
class JobSpec:
    """What a bulk job is: its id, pair, where its input came from and its output goes."""

    job_id: str
    pair: Pair
    output: Path | None
    inputs: tuple[str, ...] = ()
    fmt: str = "auto"
    id_column: str | None = None
    text_column: str = "text"
    tenant: str | None = None
    domain: str | None = None
    text_format: str = "text"
    glossary: str | None = None

    def identity(self) -> dict[str, Any]:
        """The manifest fields a job keeps for life (they change translations)."""
        return job_identity(self.pair, self.tenant, self.domain, self.text_format, self.glossary)


@dataclass
class JobReport:
    """What one run did."""

    job_id: str
    documents: int
    segments_total: int
    reused: int
    submitted: int = 0
    completed: int = 0
    errors: int = 0
    cache: Counter[str] = field(default_factory=Counter)
    doc_statuses: Counter[str] = field(default_factory=Counter)
    output: str | None = None
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "documents": self.documents,
            "segments_total": self.segments_total, "reused": self.reused,
            "submitted": self.submitted, "completed": self.completed, "errors": self.errors,
            "cache": dict(self.cache), "doc_statuses": dict(self.doc_statuses),
            "output": self.output,
            "wall_s": round(self.wall_s, 3),
        }


def model_id_for(settings: Settings, pair: Pair) -> str:
    """The model id serving ``pair`` (part of every cache and dedup digest)."""
    entry = Registry.load(settings.engine.registry).pairs.get(pair.id)
    if entry is None:
        raise BulkError(f"no model serves pair {pair.id} in {settings.engine.registry}")
    return entry.model_id


def run_job(
    settings: Settings,
    spec: JobSpec,
    corpus: Corpus,
    *,
    stop: threading.Event | None = None,
    progress: bool | None = None,
) -> JobReport:
    """Translate ``corpus`` as job ``spec.job_id``, resuming its state, and write the output.

    ``stop`` ends the run early (BulkInterrupted, state kept); ``progress``
    False hides the progress bars (None: bars on a terminal, lines in a log).
    """
    started = time.monotonic()
    if spec.output is not None:
        check_output_columns(corpus.table.column_names)
    plan = build_plan(spec.job_id, corpus, settings.limits.max_text_bytes, spec.text_format)
    state = JobState(settings.bulk.state_dir, spec.job_id)
    state.start(
        spec.identity(), inputs=list(spec.inputs), format=spec.fmt, id_column=spec.id_column,
        text_column=spec.text_column, output=str(spec.output) if spec.output else None,
        documents=len(corpus), segments_total=len(plan.tasks),
    )
    results = state.completed(plan.tasks)
    report = JobReport(spec.job_id, len(corpus), len(plan.tasks), reused=len(results))
    pending = [t for t in plan.tasks if t.request_id not in results]
    try:
        if pending:
            _Pump(settings, spec, plan, state, results, report, stop, progress).run(pending)
        documents = plan.assemble(results)
        report.doc_statuses.update(d.status for d in documents)
        if spec.output is not None:
            write_output(assemble_table(corpus.table, documents), spec.output)
            report.output = str(spec.output)
    except (KeyboardInterrupt, BulkInterrupted):
        state.update(state="interrupted", pid=None)
        raise
    except BulkError:
        state.update(state="stalled" if report.submitted else "failed", pid=None)
        raise
    report.wall_s = time.monotonic() - started
    state.update(state="done", pid=None, last_run=report.as_dict())
    return report


def write_output(table: pa.Table, path: Path) -> None:
    """Write Parquet atomically (a reader never sees a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


class _Pump:
    """Publishes pending segments within the in-flight cap and records their results."""

    def __init__(
        self, settings: Settings, spec: JobSpec, plan: JobPlan, state: JobState,
        results: dict[str, SegmentOutcome], report: JobReport,
        stop: threading.Event | None, progress: bool | None,
    ) -> None:
        self._settings = settings
        self._spec = spec
        self._plan = plan
        self._state = state
        self._results = results
        self._report = report
        self._stop = stop
        self._progress = progress
        self._template = RequestTemplate(
            job_id=spec.job_id, pair=spec.pair, model_id=model_id_for(settings, spec.pair),
            timeout_ms=settings.bulk.timeout_ms, tenant=spec.tenant, domain=spec.domain,
            text_format=spec.text_format, glossary=spec.glossary,
        )

    def run(self, pending: list[SegmentTask]) -> None:
        bulk, kafka = self._settings.bulk, self._settings.kafka
        tasks = {t.request_id: t for t in pending}
        queue = deque(pending)
        in_flight: set[str] = set()
        bars: dict[str, Any] = dict(total=len(pending), unit="seg", enabled=self._progress)
        with (
            JobResults(kafka, self._spec.job_id) as source,
            BulkPublisher(kafka, bulk_topic(self._spec.pair)) as sink,
            progress_bar("submitted", position=0, **bars) as submitted_bar,
            progress_bar("completed", position=1, **bars) as completed_bar,
        ):
            last_result = time.monotonic()
            hinted = False
            while queue or in_flight:
                if self._stop is not None and self._stop.is_set():
                    raise BulkInterrupted(f"job {self._spec.job_id} stopped; rerun to resume")
                room = bulk.max_in_flight - len(in_flight)
                batch: list[SegmentTask] = []
                while queue and len(batch) < min(room, bulk.submit_chunk):
                    task = queue.popleft()
                    if task.request_id not in self._results:  # else a late result answered it
                        batch.append(task)
                if batch:
                    self._publish(sink, batch)
                    in_flight.update(t.request_id for t in batch)
                    submitted_bar.update(len(batch))
                can_send_more = bool(queue) and len(in_flight) < bulk.max_in_flight
                arrived = self._collect(source, tasks, in_flight, 0 if can_send_more else 200)
                completed_bar.update(arrived)
                now = time.monotonic()
                if arrived:
                    last_result = now
                elif in_flight and now - last_result > bulk.stall_timeout_s:
                    raise BulkError(
                        f"no result for {bulk.stall_timeout_s:.0f}s with {len(in_flight)} "
                        f"segments in flight; is a worker serving {self._spec.pair.id} running? "
                        "The job state is kept: rerun to resume."
                    )
                elif in_flight and not hinted and now - last_result > NO_RESULT_HINT_S:
                    hinted = True
                    tqdm.write(f"no results for {NO_RESULT_HINT_S:.0f}s: is a worker serving "
                               f"{self._spec.pair.id} running? (waiting)", file=sys.stderr)

    def _publish(self, sink: BulkPublisher, batch: list[SegmentTask]) -> None:
        submitted_at = now_ms()
        doc_ids = self._plan.doc_ids
        sink.publish([
            self._template.record(self._template.request(
                doc_ids[t.doc_index], t.segment_index, t.text, submitted_at))
            for t in batch
        ])
        self._report.submitted += len(batch)

    def _collect(
        self, source: JobResults, tasks: Mapping[str, SegmentTask], in_flight: set[str],
        timeout_ms: int,
    ) -> int:
        records = []
        for result in source.poll(timeout_ms):
            task = tasks.get(result.request_id)
            if task is None or result.request_id in self._results:
                continue  # not pending in this run, or a duplicate (first result wins)
            self._results[result.request_id] = SegmentOutcome(
                result.status, result.translation, result.error)
            in_flight.discard(result.request_id)
            records.append(result_record(result, task.text))
            self._report.completed += 1
            if result.status == "ok":
                self._report.cache[result.cache or "miss"] += 1
            else:
                self._report.errors += 1
        self._state.append(records)
        return len(records)
