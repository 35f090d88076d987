"""Assembling documents from segment results: order, separators, statuses."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.bulk import BulkError
from pipeline.bulk.assemble import (
    SegmentOutcome,
    assemble_document,
    assemble_table,
    output_schema,
)
from pipeline.bulk.plan import plan_batch
from pipeline.bulk.readers import DocumentBatch
from pipeline.bulk.requests import request_id
from pipeline.bulk.schema import OUTPUT_FIELDS
from pipeline.bulk.segmenter import segment_document


def ok(text: str) -> SegmentOutcome:
    return SegmentOutcome("ok", text)


def test_all_ok_joins_with_the_original_separators() -> None:
    seg = segment_document("One.  Two!\r\n\r\nThree\n")
    doc = assemble_document(seg, [ok("1"), ok("2"), ok("3")])
    assert (doc.translation, doc.status, doc.errors) == ("1  2\r\n\r\n3\n", "ok", [])


def test_partial_keeps_source_for_failed_segments() -> None:
    seg = segment_document("One. Two. Three.")
    doc = assemble_document(seg, [ok("1"), SegmentOutcome("timeout", error="late"), None])
    assert doc.status == "partial"
    assert doc.translation == "1 Two. Three."
    assert doc.errors == [
        {"segment_index": 1, "status": "timeout", "error": "late"},
        {"segment_index": 2, "status": "missing", "error": "no result"},
    ]


def test_nothing_translated_is_an_error() -> None:
    seg = segment_document("One. Two.")
    doc = assemble_document(seg, [SegmentOutcome("error", error="boom"), None])
    assert (doc.translation, doc.status, len(doc.errors)) == (None, "error", 2)


def test_empty_and_null_documents() -> None:
    assert assemble_document(segment_document(""), []).translation == ""
    assert assemble_document(segment_document(" \n"), []).translation == " \n"
    null = assemble_document(None, [])
    assert (null.translation, null.status) == (None, "ok")


def test_an_ok_result_without_translation_is_not_ok() -> None:
    doc = assemble_document(segment_document("One."), [SegmentOutcome("ok", None)])
    assert doc.status == "error"


def batch_of(table: pa.Table) -> DocumentBatch:
    (rows,) = table.to_batches()
    return DocumentBatch(rows, table.column("id").to_pylist(), table.column("text").to_pylist(), 0)


def test_plan_assembles_every_document_of_a_batch_in_input_order() -> None:
    table = pa.table(
        {
            "id": ["d2", "d1", "d3", "d4"],
            "text": ["B one. B two.", "A one.", "", None],
            "meta": [2, 1, 3, 4],
        }
    )
    plan = plan_batch("job", batch_of(table), 16 * 1024)
    assert [(t.doc_index, t.segment_index) for t in plan.tasks] == [(0, 0), (0, 1), (1, 0)]
    assert plan.tasks[0].request_id == request_id("job", "d2", 0)
    # results arrive in any order; one is missing
    plan.outcomes.update({t.request_id: ok(t.text.upper()) for t in reversed(plan.tasks[1:])})
    assert not plan.done
    documents = plan.assemble()
    assert [d.status for d in documents] == ["partial", "ok", "ok", "ok"]
    assert [d.translation for d in documents] == ["B one. B TWO.", "A ONE.", "", None]

    out = assemble_table(plan.rows, documents)
    assert out.schema == output_schema(table.schema)
    assert out.column_names == ["id", "text", "meta", "translation", "status", "errors"]
    assert out.column("id").to_pylist() == ["d2", "d1", "d3", "d4"]
    assert out.schema.field("errors").type == OUTPUT_FIELDS[2].type
    assert out.column("errors").to_pylist()[0] == [
        {"segment_index": 0, "status": "missing", "error": "no result"}
    ]
    plan.outcomes[plan.tasks[0].request_id] = ok("X")
    assert plan.done


def test_output_columns_must_not_exist_in_the_input() -> None:
    table = pa.table({"id": ["a"], "text": ["x"], "status": ["draft"]})
    with pytest.raises(BulkError, match="status"):
        output_schema(table.schema)
    plan = plan_batch("j", batch_of(table), 1024)
    with pytest.raises(BulkError, match="status"):
        assemble_table(plan.rows, plan.assemble())
