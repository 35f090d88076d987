"""A job's plan: every document's segmentation and every segment's request id."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pipeline.bulk import BulkError
from pipeline.bulk.assemble import DocumentOutcome, SegmentOutcome, assemble_document
from pipeline.bulk.readers import Corpus
from pipeline.bulk.requests import doc_key, request_id
from pipeline.bulk.segmenter import Segmentation, segment_for_format


@dataclass(frozen=True, slots=True)
class SegmentTask:
    """One segment to translate."""

    request_id: str
    doc_index: int
    segment_index: int
    text: str


@dataclass(frozen=True)
class JobPlan:
    """Segmentations in corpus order (``None`` for a null text) and the flat task list."""

    job_id: str
    doc_ids: list[str]
    documents: list[Segmentation | None]
    tasks: list[SegmentTask]

    def assemble(self, results: Mapping[str, SegmentOutcome]) -> list[DocumentOutcome]:
        """Every document, in order, from results by request id (absent: no result)."""
        outcomes: list[list[SegmentOutcome | None]] = [
            [] if seg is None else [None] * len(seg.segments) for seg in self.documents
        ]
        for task in self.tasks:
            outcomes[task.doc_index][task.segment_index] = results.get(task.request_id)
        return [
            assemble_document(seg, doc)
            for seg, doc in zip(self.documents, outcomes, strict=True)
        ]


def build_plan(
    job_id: str, corpus: Corpus, max_segment_bytes: int, text_format: str = "text"
) -> JobPlan:
    """Segment every document of ``corpus`` and name each segment's request.

    Plain text is cut into sentences; markup documents (``text_format``
    html, xml or markdown) are one segment each.
    """
    keys: dict[str, str] = {}
    documents: list[Segmentation | None] = []
    tasks: list[SegmentTask] = []
    for doc_index, (doc_id, text) in enumerate(zip(corpus.ids, corpus.texts, strict=True)):
        key = doc_key(doc_id)
        if keys.setdefault(key, doc_id) != doc_id:
            raise BulkError(f"document ids {keys[key]!r} and {doc_id!r} share a digest")
        if text is None:
            documents.append(None)
            continue
        try:
            segmentation = segment_for_format(text, text_format, max_segment_bytes)
        except BulkError as exc:
            raise BulkError(f"document {doc_id!r}: {exc}") from None
        documents.append(segmentation)
        tasks.extend(
            SegmentTask(request_id(job_id, doc_id, i), doc_index, i, segment.text)
            for i, segment in enumerate(segmentation.segments)
        )
    return JobPlan(job_id, list(corpus.ids), documents, tasks)
