"""Putting documents back together from their segments' results.

A document's status is ``ok`` when every segment was translated (documents
with no segments included), ``partial`` when some were (the others keep
their source text, so the layout stays whole), and ``error`` when none were
(translation null). Each untranslated segment is listed in ``errors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from pipeline.bulk import BulkInputError
from pipeline.bulk.schema import OUTPUT_COLUMNS, OUTPUT_FIELDS, DocStatus
from pipeline.bulk.segmenter import Segmentation


@dataclass(frozen=True, slots=True)
class SegmentOutcome:
    """What came back for one segment (a result's status, translation and error)."""

    status: str
    translation: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.translation is not None


@dataclass(frozen=True, slots=True)
class DocumentOutcome:
    """One output row's appended columns."""

    translation: str | None
    status: DocStatus
    errors: list[dict[str, Any]] = field(default_factory=list)


def assemble_document(
    segmentation: Segmentation | None, outcomes: Sequence[SegmentOutcome | None]
) -> DocumentOutcome:
    """Join one document's segment results (``None``: no result) with its separators.

    ``segmentation`` is ``None`` for a null input text, which stays null.
    """
    if segmentation is None:
        return DocumentOutcome(None, "ok")
    if len(outcomes) != len(segmentation.segments):
        raise ValueError(f"{len(outcomes)} outcomes for {len(segmentation.segments)} segments")
    texts: list[str] = []
    errors: list[dict[str, Any]] = []
    for index, (segment, outcome) in enumerate(zip(segmentation.segments, outcomes, strict=True)):
        if outcome is not None and outcome.ok:
            texts.append(outcome.translation or "")
            continue
        texts.append(segment.text)
        errors.append(
            {
                "segment_index": index,
                "status": "missing" if outcome is None else outcome.status,
                "error": "no result" if outcome is None else outcome.error,
            }
        )
    if not errors:
        return DocumentOutcome(segmentation.join(texts), "ok")
    if len(errors) == len(texts):
        return DocumentOutcome(None, "error", errors)
    return DocumentOutcome(segmentation.join(texts), "partial", errors)


def check_output_columns(names: Sequence[str]) -> None:
    """Refuse an input that already has one of the columns the output appends."""
    clash = [name for name in OUTPUT_COLUMNS if name in names]
    if clash:
        raise BulkInputError(
            f"the input already has column(s) {', '.join(clash)}; rename them before translating"
        )


Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def output_schema(schema: pa.Schema) -> pa.Schema:
    """The output's schema for an input ``schema``: its columns, then :data:`OUTPUT_FIELDS`."""
    check_output_columns(schema.names)
    return pa.schema([*schema, *OUTPUT_FIELDS], metadata=schema.metadata)


def assemble_table(table: Rows, documents: Sequence[DocumentOutcome]) -> Rows:
    """``table`` (input rows, in order) with ``translation``, ``status`` and ``errors`` appended."""
    check_output_columns(table.column_names)
    if len(documents) != table.num_rows:
        raise ValueError(f"{len(documents)} documents for {table.num_rows} rows")
    columns = (
        [d.translation for d in documents],
        [d.status for d in documents],
        [d.errors for d in documents],
    )
    for f, values in zip(OUTPUT_FIELDS, columns, strict=True):
        table = table.append_column(f, pa.array(values, type=f.type))
    return table
