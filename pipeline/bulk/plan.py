"""Planning one batch of documents: segmentations, request ids, and outcomes as they arrive.

A job is planned and assembled one :class:`~pipeline.bulk.readers.DocumentBatch`
at a time, so only the batches in flight are in memory.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pyarrow as pa

from pipeline.bulk import BulkInputError
from pipeline.bulk.assemble import DocumentOutcome, SegmentOutcome, assemble_document
from pipeline.bulk.readers import DocumentBatch
from pipeline.bulk.requests import request_id
from pipeline.bulk.segmenter import Segmentation, segment_for_format


@dataclass(frozen=True, slots=True)
class SegmentTask:
    """One segment to translate (``doc_index``: the document's place in its batch)."""

    request_id: str
    doc_index: int
    segment_index: int
    text: str


@dataclass
class BatchPlan:
    """A batch's rows and ids, segmentations (``None`` for a null text), tasks, outcomes.

    The documents' texts live on only as their segments (and in ``rows``).
    """

    rows: pa.RecordBatch
    ids: list[str]
    first: int
    documents: list[Segmentation | None]
    tasks: list[SegmentTask]
    outcomes: dict[str, SegmentOutcome] = field(default_factory=dict)
    # what the batch holds in memory (Arrow rows, Python strings), kept up to date
    nbytes: int = 0

    @property
    def done(self) -> bool:
        """Whether every segment has an outcome."""
        return len(self.outcomes) >= len(self.tasks)

    def add(self, request_id: str, outcome: SegmentOutcome) -> None:
        """Record one segment's outcome (the first one counts)."""
        if request_id not in self.outcomes:
            self.outcomes[request_id] = outcome
            self.nbytes += sys.getsizeof(outcome.translation or "")

    def assemble(self) -> list[DocumentOutcome]:
        """Every document of the batch, in order (a segment without outcome: no result)."""
        outcomes: list[list[SegmentOutcome | None]] = [
            [] if seg is None else [None] * len(seg.segments) for seg in self.documents
        ]
        for task in self.tasks:
            outcomes[task.doc_index][task.segment_index] = self.outcomes.get(task.request_id)
        return [
            assemble_document(seg, doc) for seg, doc in zip(self.documents, outcomes, strict=True)
        ]


def plan_batch(
    job_id: str, batch: DocumentBatch, max_segment_bytes: int, text_format: str = "text"
) -> BatchPlan:
    """Segment every document of ``batch`` and name each segment's request.

    Plain text is cut into sentences; markup documents (``text_format``
    html, xml or markdown) are one segment each.
    """
    documents: list[Segmentation | None] = []
    tasks: list[SegmentTask] = []
    for doc_index, (doc_id, text) in enumerate(zip(batch.ids, batch.texts, strict=True)):
        if text is None:
            documents.append(None)
            continue
        try:
            segmentation = segment_for_format(text, text_format, max_segment_bytes)
        except BulkInputError as exc:
            raise BulkInputError(f"document {doc_id!r}: {exc}") from None
        documents.append(segmentation)
        tasks.extend(
            SegmentTask(request_id(job_id, doc_id, i), doc_index, i, segment.text)
            for i, segment in enumerate(segmentation.segments)
        )
    held = batch.rows.nbytes + sum(
        sys.getsizeof(s.lead) + sys.getsizeof(s.text)
        for seg in documents
        if seg is not None
        for s in seg.segments
    )
    return BatchPlan(batch.rows, batch.ids, batch.first, documents, tasks, nbytes=held)
