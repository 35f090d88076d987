"""schemas/bulk_output.arrow.json is exported from pipeline.bulk.schema and matches it."""

from __future__ import annotations

import json

from pipeline.bulk.schema import OUTPUT_FIELDS, SCHEMA_FILE, dump_output_schema


def test_schema_file_is_current() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == dump_output_schema(), (
        "regenerate with: python -c 'from pipeline.bulk.schema import *; "
        "SCHEMA_FILE.write_text(dump_output_schema())'"
    )


def test_schema_file_describes_the_appended_columns() -> None:
    doc = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert [f["name"] for f in doc["appended_fields"]] == [f.name for f in OUTPUT_FIELDS]
    errors = doc["appended_fields"][2]
    assert errors["type"] == "list"
    assert [f["name"] for f in errors["item"]["fields"]] == ["segment_index", "status", "error"]
    assert doc["statuses"] == ["ok", "partial", "error"]
