"""Running a bulk job: stream, plan, publish with flow control, collect, assemble, write.

Memory is bounded whatever the corpus size. Documents are read one record
batch at a time; each batch is planned (segmented, request ids named),
its segments published within ``bulk.max_in_flight``, and written to the
output as soon as it and every batch before it are complete. Reading pauses
while the batches held for in-order assembly exceed ``bulk.window_bytes``.
Results are stored in the job state as they arrive; a rerun of the same job
publishes only the segments without an ``ok`` result, looked up one batch at
a time. Results come back on a reply topic of the job's own
(:mod:`pipeline.kafka.reply_topics`), deleted when the run ends.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from pipeline.bulk import BulkCancelled, BulkError, BulkInputError, BulkInterrupted
from pipeline.bulk.assemble import SegmentOutcome, assemble_table, output_schema
from pipeline.bulk.plan import BatchPlan, SegmentTask, plan_batch
from pipeline.bulk.readers import CorpusReader
from pipeline.bulk.requests import RequestTemplate, job_identity
from pipeline.bulk.state import JobState, result_record
from pipeline.bulk.transport import BulkPublisher, JobResults
from pipeline.contract.messages import TranslationResult, now_ms
from pipeline.contract.pairs import BULK_REPLY_LABEL, Pair, bulk_work_topic
from pipeline.control.cancels import cancels_for, publish_cancels
from pipeline.engine.registry import Registry
from pipeline.kafka.reply_topics import ReplyTopic
from pipeline.observability.progress import progress_bar
from pipeline.settings import Settings

log = logging.getLogger(__name__)

NO_RESULT_HINT_S = 30.0
# how often a run looks for `bulk cancel` (a manifest read)
CANCEL_CHECK_S = 0.1


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
    # read results from this kept topic (shared, filtered by job id) instead of a reply
    # topic of the job's own: the gateway's file jobs use its process's reply topic
    reply_topic: str | None = None

    def identity(self) -> dict[str, Any]:
        """The manifest fields a job keeps for life (they change translations)."""
        return job_identity(self.pair, self.tenant, self.domain, self.text_format, self.glossary)


@dataclass
class JobReport:
    """What one run did."""

    job_id: str
    documents: int
    segments_total: int = 0
    reused: int = 0
    submitted: int = 0
    completed: int = 0
    errors: int = 0
    cache: Counter[str] = field(default_factory=Counter)
    doc_statuses: Counter[str] = field(default_factory=Counter)
    output: str | None = None
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "documents": self.documents,
            "segments_total": self.segments_total,
            "reused": self.reused,
            "submitted": self.submitted,
            "completed": self.completed,
            "errors": self.errors,
            "cache": dict(self.cache),
            "doc_statuses": dict(self.doc_statuses),
            "output": self.output,
            "wall_s": round(self.wall_s, 3),
        }


def model_id_for(settings: Settings, pair: Pair) -> str:
    """The model id serving ``pair`` (part of every cache and dedup digest)."""
    model = Registry.load(settings.engine.registry).model_for(pair)
    if model is None:
        raise BulkInputError(f"no model serves pair {pair.id} in {settings.engine.registry}")
    return model.model_id


def run_job(
    settings: Settings,
    spec: JobSpec,
    reader: CorpusReader,
    *,
    stop: threading.Event | None = None,
    progress: bool | None = None,
) -> JobReport:
    """Translate the corpus of ``reader`` as job ``spec.job_id``, resuming its state.

    ``stop`` ends the run early (BulkInterrupted, state kept); ``bulk cancel``
    ends it with BulkCancelled; ``progress`` False hides the progress bars
    (None: bars on a terminal, lines in a log).
    """
    started = time.monotonic()
    info = reader.scan()
    schema = output_schema(info.schema) if spec.output is not None else None
    state = JobState(settings.bulk.state_dir, spec.job_id)
    state.start(
        spec.identity(),
        inputs=list(spec.inputs),
        format=spec.fmt,
        id_column=spec.id_column,
        text_column=spec.text_column,
        output=str(spec.output) if spec.output else None,
        documents=info.documents,
    )
    report = JobReport(spec.job_id, info.documents)
    try:
        with _OutputFile(spec.output, schema) as output:
            _Pump(settings, spec, state, report, output, stop, progress).run(reader.documents())
            report.output = output.commit()
    except BulkCancelled:
        state.update(state="cancelled", pid=None)
        raise
    except (KeyboardInterrupt, BulkInterrupted):
        state.update(state="interrupted", pid=None)
        raise
    except BulkError:
        state.update(state="stalled" if report.submitted else "failed", pid=None)
        raise
    finally:
        state.close()
    report.wall_s = time.monotonic() - started
    state.update(
        state="done", pid=None, segments_total=report.segments_total, last_run=report.as_dict()
    )
    return report


class _OutputFile:
    """The output Parquet, written batch by batch to a temporary file, renamed when complete."""

    def __init__(self, path: Path | None, schema: pa.Schema | None) -> None:
        self._path = path
        self._schema = schema
        self._tmp = path.with_name(f".{path.name}.tmp") if path is not None else None
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> _OutputFile:
        if self._tmp is not None and self._schema is not None:
            self._tmp.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, self._schema)
        return self

    def write(self, rows: pa.RecordBatch) -> None:
        if self._writer is not None:
            self._writer.write_batch(rows)

    def commit(self) -> str | None:
        """Close and move into place (a reader never sees a half-written file)."""
        if self._writer is None or self._tmp is None or self._path is None:
            return None
        self._writer.close()
        self._writer = None
        self._tmp.replace(self._path)
        return str(self._path)

    def __exit__(self, *exc_info: object) -> None:
        if self._writer is not None:  # not committed: leave no partial output behind
            self._writer.close()
            if self._tmp is not None:
                self._tmp.unlink(missing_ok=True)


class _Pump:
    """Reads, publishes within the in-flight cap, records results, writes in order."""

    def __init__(
        self,
        settings: Settings,
        spec: JobSpec,
        state: JobState,
        report: JobReport,
        output: _OutputFile,
        stop: threading.Event | None,
        progress: bool | None,
    ) -> None:
        self._settings = settings
        self._spec = spec
        self._state = state
        self._report = report
        self._output = output
        self._stop = stop
        self._progress = progress
        self._model_id = model_id_for(settings, spec.pair)
        self._window: deque[BatchPlan] = deque()  # read, not yet written, in input order
        # request id -> its batch and segment, until it has a result
        self._owner: dict[str, tuple[BatchPlan, SegmentTask]] = {}
        self._unpublished: deque[SegmentTask] = deque()
        self._in_flight: set[str] = set()

    def run(self, documents: Iterator[Any]) -> None:
        bulk, kafka = self._settings.bulk, self._settings.kafka
        bars: dict[str, Any] = dict(enabled=self._progress)
        with (
            ReplyTopic.for_call(
                kafka,
                self._settings.replies,
                self._spec.reply_topic,
                label=f"{BULK_REPLY_LABEL}.{self._spec.job_id}",
            ) as reply,
            JobResults(kafka, self._spec.job_id, reply.name) as source,
            BulkPublisher(kafka, bulk_work_topic(self._model_id)) as sink,
            progress_bar("segments", unit="seg", position=0, **bars) as segments_bar,
            progress_bar(
                "documents", total=self._report.documents, unit="doc", position=1, **bars
            ) as documents_bar,
        ):
            template = RequestTemplate(
                job_id=self._spec.job_id,
                pair=self._spec.pair,
                model_id=self._model_id,
                timeout_ms=bulk.timeout_ms,
                tenant=self._spec.tenant,
                domain=self._spec.domain,
                text_format=self._spec.text_format,
                glossary=self._spec.glossary,
                reply_to=reply.name,
            )
            exhausted = False
            last_result = last_check = time.monotonic()
            hinted = False
            while not exhausted or self._window:
                if self._stop is not None and self._stop.is_set():
                    raise BulkInterrupted(f"job {self._spec.job_id} stopped; rerun to resume")
                if time.monotonic() - last_check > CANCEL_CHECK_S:
                    last_check = time.monotonic()
                    if self._state.cancel_requested():
                        self._cancel_published()
                        raise BulkCancelled(f"job {self._spec.job_id} was cancelled")
                exhausted = exhausted or not self._read(documents)
                published = self._publish(sink, template)
                can_send_more = bool(self._unpublished) and (
                    len(self._in_flight) < bulk.max_in_flight
                )
                arrived = self._collect(source, 0 if can_send_more or published else 200)
                segments_bar.update(arrived)
                documents_bar.update(self._write_ready())
                now = time.monotonic()
                if arrived or not self._in_flight:
                    last_result, hinted = now, False
                elif now - last_result > bulk.stall_timeout_s:
                    raise BulkError(
                        f"no result for {bulk.stall_timeout_s:.0f}s with {len(self._in_flight)} "
                        f"segments in flight; is a worker serving {self._spec.pair.id} running? "
                        "The job state is kept: rerun to resume."
                    )
                elif not hinted and now - last_result > NO_RESULT_HINT_S:
                    hinted = True
                    tqdm.write(
                        f"no results for {NO_RESULT_HINT_S:.0f}s: is a worker serving "
                        f"{self._spec.pair.id} running? (waiting)",
                        file=sys.stderr,
                    )

    def _cancel_published(self) -> None:
        """Cancel the job again, stamped after this run's last publish.

        ``bulk cancel`` covers the segments submitted before it; segments this run
        published until it noticed would escape it. A cancel stamped now covers them.
        """
        publish_cancels(
            self._settings, cancels_for(job_ids=[self._spec.job_id], requested_by="bulk cancel")
        )

    def _held_bytes(self) -> int:
        return sum(plan.nbytes for plan in self._window)

    def _read(self, documents: Iterator[Any]) -> bool:
        """Plan more batches while memory and the publish queue allow; False at the end."""
        bulk = self._settings.bulk
        while len(self._unpublished) < bulk.max_in_flight and (
            not self._window or self._held_bytes() < bulk.window_bytes
        ):
            batch = next(documents, None)
            if batch is None:
                return False
            plan = plan_batch(
                self._spec.job_id,
                batch,
                self._settings.limits.max_text_bytes,
                self._spec.text_format,
            )
            self._report.segments_total += len(plan.tasks)
            for request_id, outcome in self._state.completed(plan.tasks).items():
                plan.add(request_id, outcome)
            self._report.reused += len(plan.outcomes)
            for task in plan.tasks:
                if task.request_id not in plan.outcomes:
                    self._owner[task.request_id] = (plan, task)
                    self._unpublished.append(task)
            self._window.append(plan)
        return True

    def _publish(self, sink: BulkPublisher, template: RequestTemplate) -> int:
        bulk = self._settings.bulk
        room = bulk.max_in_flight - len(self._in_flight)
        batch: list[SegmentTask] = []
        while self._unpublished and len(batch) < min(room, bulk.submit_chunk):
            task = self._unpublished.popleft()
            if task.request_id in self._owner:  # else a late result of an earlier run answered it
                batch.append(task)
        if not batch:
            return 0
        submitted_at = now_ms()
        records = []
        for task in batch:
            plan, _ = self._owner[task.request_id]
            doc_id = plan.ids[task.doc_index]
            records.append(
                template.record(
                    template.request(doc_id, task.segment_index, task.text, submitted_at)
                )
            )
        sink.publish(records)
        self._in_flight.update(t.request_id for t in batch)
        self._report.submitted += len(batch)
        return len(batch)

    def _collect(self, source: JobResults, timeout_ms: int) -> int:
        records = []
        for result in source.poll(timeout_ms):
            owned = self._owner.pop(result.request_id, None)
            if owned is None:
                continue  # not pending in this run, or a duplicate (first result wins)
            plan, task = owned
            self._record(plan, result)
            records.append(result_record(result, task.text))
        self._state.append(records)
        return len(records)

    def _record(self, plan: BatchPlan, result: TranslationResult) -> None:
        plan.add(result.request_id, SegmentOutcome(result.status, result.translation, result.error))
        self._in_flight.discard(result.request_id)
        self._report.completed += 1
        if result.status == "ok":
            self._report.cache[result.cache or "miss"] += 1
        else:
            self._report.errors += 1

    def _write_ready(self) -> int:
        """Write the complete batches at the head of the window; returns documents written."""
        written = 0
        while self._window and self._window[0].done:
            plan = self._window.popleft()
            documents = plan.assemble()
            self._report.doc_statuses.update(d.status for d in documents)
            self._output.write(assemble_table(plan.rows, documents))
            written += len(documents)
        return written
