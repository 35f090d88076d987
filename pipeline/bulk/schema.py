"""Arrow schemas of bulk files; ``schemas/bulk_output.arrow.json`` is exported from here.

The output of a bulk job (CLI or Spark) is the input's columns followed by
:data:`OUTPUT_FIELDS`. ``tests/unit/bulk/test_bulk_schema.py`` checks that the
exported file matches these definitions.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pyarrow as pa

from pipeline.settings import PROJECT_ROOT

SCHEMA_FILE = PROJECT_ROOT / "schemas" / "bulk_output.arrow.json"

DocStatus = Literal["ok", "partial", "error"]
DOC_STATUSES: tuple[DocStatus, ...] = ("ok", "partial", "error")

SEGMENT_ERROR = pa.struct(
    [
        pa.field("segment_index", pa.int32(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # error | timeout | missing
        pa.field("error", pa.string()),
    ]
)

OUTPUT_FIELDS: tuple[pa.Field, ...] = (
    # null when no segment was translated (status error) or the input text was null
    pa.field("translation", pa.string()),
    pa.field("status", pa.string(), nullable=False),
    pa.field("errors", pa.list_(pa.field("item", SEGMENT_ERROR, nullable=False)), nullable=False),
)
OUTPUT_COLUMNS: tuple[str, ...] = tuple(f.name for f in OUTPUT_FIELDS)


def _type_json(t: pa.DataType) -> dict[str, Any]:
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_json(t.field(i)) for i in range(t.num_fields)]}
    if pa.types.is_list(t):
        return {"type": "list", "item": _field_json(t.value_field)}
    return {"type": str(t)}


def _field_json(field: pa.Field) -> dict[str, Any]:
    return {"name": field.name, "nullable": field.nullable, **_type_json(field.type)}


def output_schema_document() -> dict[str, Any]:
    """The language-neutral description of the columns a bulk job appends."""
    return {
        "$id": "https://babelstream.dev/schemas/bulk_output.arrow.json",
        "description": (
            "Bulk job output (Parquet): every input column, in input order, followed by "
            "these columns. status: ok (every segment translated), partial (some; failed "
            "segments keep their source text), error (none; translation is null)."
        ),
        "statuses": list(DOC_STATUSES),
        "appended_fields": [_field_json(f) for f in OUTPUT_FIELDS],
    }


def dump_output_schema() -> str:
    """:func:`output_schema_document` as the text of the schema file."""
    return json.dumps(output_schema_document(), indent=2) + "\n"
