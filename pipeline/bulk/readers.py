"""Reading a corpus (Parquet files or datasets, JSON Lines, plain-text files) with pyarrow.

Every input becomes rows of one Arrow table, in the order the inputs are
given and, within an input, in file and row order. Plain-text input is one
document per file, read as UTF-8 exactly as stored (``\\r\\n`` kept), with
columns ``<id column>`` (the path relative to the folder given, or the path
as given for a file) and ``<text column>``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.json as pa_json

from pipeline.bulk import BulkError

Format = Literal["auto", "parquet", "jsonl", "text"]
FORMATS: tuple[Format, ...] = ("auto", "parquet", "jsonl", "text")
PARQUET_SUFFIXES = frozenset({".parquet", ".pq"})
JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson", ".json"})
DEFAULT_ID_COLUMN = "id"


@dataclass(frozen=True)
class Corpus:
    """Documents in input order: the original table plus their ids and texts."""

    table: pa.Table
    ids: list[str]
    texts: list[str | None]
    text_column: str
    id_column: str | None

    def __len__(self) -> int:
        return len(self.ids)


def detect_format(path: Path) -> Format:
    """The format of one input path (a folder of Parquet files is a dataset)."""
    if path.is_dir():
        files = [p for p in path.rglob("*") if p.is_file() and not _hidden(p, path)]
        if any(p.suffix.lower() in PARQUET_SUFFIXES for p in files):
            return "parquet"
        if files and all(p.suffix.lower() in JSONL_SUFFIXES for p in files):
            return "jsonl"
        return "text"
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    return "text"


def read_corpus(
    inputs: Sequence[Path],
    *,
    fmt: Format = "auto",
    id_column: str | None = None,
    text_column: str = "text",
) -> Corpus:
    """Read every input into one corpus.

    ``id_column=None`` uses a column named ``id`` when there is one, else the
    row's position in the corpus. Document ids must be unique.
    """
    if not inputs:
        raise BulkError("no input given")
    tables = []
    for path in inputs:
        if not path.exists():
            raise BulkError(f"input {path} does not exist")
        kind = detect_format(path) if fmt == "auto" else fmt
        if kind == "parquet":
            tables.append(ds.dataset(path, format="parquet", partitioning="hive").to_table())
        elif kind == "jsonl":
            tables.extend(_read_jsonl(p) for p in _files(path))
        else:
            tables.append(_read_text(path, id_column or DEFAULT_ID_COLUMN, text_column))
    tables = [t for t in tables if t.num_columns]
    if not tables:
        raise BulkError("the inputs hold no documents")
    try:
        table = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise BulkError(f"inputs do not share compatible columns: {exc}") from None
    return corpus_from_table(table, id_column=id_column, text_column=text_column)


def corpus_from_table(
    table: pa.Table, *, id_column: str | None = None, text_column: str = "text"
) -> Corpus:
    """A corpus over an in-memory table (what :func:`read_corpus` ends with)."""
    if text_column not in table.column_names:
        raise BulkError(
            f"no text column {text_column!r} (columns: {', '.join(table.column_names)}); "
            "choose one with --text-column"
        )
    texts_col = table.column(text_column)
    if not (pa.types.is_string(texts_col.type) or pa.types.is_large_string(texts_col.type)
            or pa.types.is_null(texts_col.type)):
        raise BulkError(f"text column {text_column!r} holds {texts_col.type}, not strings")
    if id_column is None and DEFAULT_ID_COLUMN in table.column_names:
        id_column = DEFAULT_ID_COLUMN
    if id_column is None:
        ids = [str(i) for i in range(table.num_rows)]
    elif id_column not in table.column_names:
        raise BulkError(f"no id column {id_column!r} (columns: {', '.join(table.column_names)})")
    else:
        raw = table.column(id_column).to_pylist()
        if any(v is None for v in raw):
            raise BulkError(f"id column {id_column!r} has empty (null) ids")
        ids = [str(v) for v in raw]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    if duplicates:
        raise BulkError(
            f"document ids must be unique; repeated: {', '.join(map(repr, duplicates[:5]))}"
        )
    return Corpus(table, ids, texts_col.to_pylist(), text_column, id_column)


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p, path))


def _read_jsonl(path: Path) -> pa.Table:
    if path.stat().st_size == 0:
        return pa.table({})
    try:
        return pa_json.read_json(path)
    except pa.ArrowInvalid as exc:
        raise BulkError(f"{path}: not JSON Lines: {exc}") from None


def _read_text(path: Path, id_column: str, text_column: str) -> pa.Table:
    files = _files(path)
    ids = [str(f.relative_to(path)) if path.is_dir() else str(path) for f in files]
    texts = []
    for f in files:
        try:
            texts.append(f.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BulkError(f"{f}: not UTF-8 text ({exc})") from None
    return pa.table({id_column: pa.array(ids, pa.string()),
                     text_column: pa.array(texts, pa.string())})
