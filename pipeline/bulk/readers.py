"""Reading a corpus as a stream of record batches (Parquet, JSON Lines, CSV, plain text).

Nothing reads a whole corpus into memory: Parquet files and datasets go
through pyarrow's dataset scanner (one record batch at a time, one fragment
read ahead), JSON Lines files are cut into line-aligned chunks that pyarrow
parses, CSV goes through pyarrow's streaming CSV reader, and plain-text
input is one document per file, a few files at a time. Memory therefore
follows the batch size and the largest document, not the corpus.

Rows keep the order the inputs are given in and, within an input, file and
row order. :meth:`CorpusReader.scan` runs once before a job starts: it checks
the columns, counts the documents, refuses repeated document ids before
anything is published, and settles one schema for all inputs (JSON Lines
files can only be known by reading them, so they are parsed twice).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.dataset as ds
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from pipeline.bulk import BulkInputError
from pipeline.bulk.requests import doc_key

Format = Literal["auto", "parquet", "jsonl", "csv", "text"]
FORMATS: tuple[Format, ...] = ("auto", "parquet", "jsonl", "csv", "text")
SUFFIXES: dict[str, Format] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
}
DEFAULT_ID_COLUMN = "id"
# rows per record batch (at most), about how many bytes one batch holds, bytes per JSONL chunk
BATCH_ROWS = 1024
BATCH_BYTES = 1 << 20
PROBE_ROWS = 16
JSONL_CHUNK_BYTES = 8 << 20


def supported_suffixes() -> str:
    return ", ".join(sorted(SUFFIXES))


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.relative_to(root).parts)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p, path))


def _format_of_file(path: Path) -> Format:
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise BulkInputError(
            f"{path}: unknown file type {path.suffix or '(no suffix)'!r}; supported: "
            f"{supported_suffixes()} (or say --format text to read any file as one document)"
        )
    return kind


def detect_format(path: Path) -> Format:
    """The format of one input path by suffix (a folder: of all its files, which must agree)."""
    if not path.is_dir():
        return _format_of_file(path)
    kinds = {_format_of_file(p) for p in _files(path)}
    if not kinds:
        raise BulkInputError(f"{path}: the folder holds no files")
    if len(kinds) > 1:
        raise BulkInputError(
            f"{path}: the folder mixes formats ({', '.join(sorted(kinds))}); "
            "give one folder per format"
        )
    return kinds.pop()


class _Source:
    """One input path of one format, read batch by batch."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def schema(self) -> pa.Schema:
        raise NotImplementedError

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches in order; ``columns``: only these (where the format can skip)."""
        raise NotImplementedError

    def count(self) -> int:
        """How many documents (rows)."""
        return sum(batch.num_rows for batch in self.batches([]))


class _ParquetSource(_Source):
    """A Parquet file, or a folder of them (a dataset, hive partition folders included).

    Each file is read with ``ParquetFile.iter_batches`` on one thread, a row
    group at a time: the dataset scanner's read-ahead and parallel decoding
    hold several row groups at once.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            dataset = ds.dataset(path, format="parquet", partitioning="hive")
        except pa.ArrowInvalid as exc:
            raise BulkInputError(f"{path}: not Parquet ({exc})") from None
        # (file, its hive partition values) in the dataset's (sorted) file order
        self._files = [
            (Path(fragment.path), ds.get_partition_keys(fragment.partition_expression))
            for fragment in dataset.get_fragments()
        ]
        self._partition_fields = [
            field for field in dataset.schema if any(field.name in keys for _, keys in self._files)
        ]
        self._batch_rows: int | None = None

    def schema(self) -> pa.Schema:
        schemas = [pq.read_schema(file) for file, _ in self._files]
        return unify([*schemas, pa.schema(self._partition_fields)], str(self.path))

    def count(self) -> int:
        return sum(pq.ParquetFile(file).metadata.num_rows for file, _ in self._files)

    def _rows_per_batch(self) -> int:
        """Rows that make about :data:`BATCH_BYTES`, measured on the first rows.

        (Row-group metadata cannot tell: dictionary-encoded repeated texts are tiny
        on disk and full size in memory.)
        """
        if self._batch_rows is None:
            probe = next(iter(self._read(PROBE_ROWS, None)), None)
            if probe is None or not probe.num_rows or not probe.nbytes:
                self._batch_rows = BATCH_ROWS
            else:
                per_row = probe.nbytes / probe.num_rows
                self._batch_rows = max(1, min(BATCH_ROWS, int(BATCH_BYTES / per_row)))
        return self._batch_rows

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        rows = BATCH_ROWS if columns is not None else self._rows_per_batch()
        yield from self._read(rows, columns)

    def _read(self, rows: int, columns: Sequence[str] | None) -> Iterator[pa.RecordBatch]:
        for file, keys in self._files:
            parquet = pq.ParquetFile(file)
            names = set(parquet.schema_arrow.names)
            wanted = None if columns is None else [c for c in columns if c in names]
            for batch in parquet.iter_batches(batch_size=rows, columns=wanted, use_threads=False):
                yield self._with_partitions(batch, keys, columns)

    def _with_partitions(
        self, batch: pa.RecordBatch, keys: dict[str, object], columns: Sequence[str] | None
    ) -> pa.RecordBatch:
        for field in self._partition_fields:
            if field.name in keys and (columns is None or field.name in columns):
                value = pa.array([keys[field.name]] * batch.num_rows, field.type)
                batch = batch.append_column(field, value)
        return batch


class _JsonlSource(_Source):
    """JSON Lines, cut into line-aligned chunks that pyarrow parses (types inferred per chunk)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._schema: pa.Schema | None = None

    def schema(self) -> pa.Schema:
        if self._schema is None:
            schemas = [batch.schema for batch in self.batches()]
            self._schema = unify(schemas, str(self.path)) if schemas else pa.schema([])
        return self._schema

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        for file in _files(self.path):
            line = 1
            for chunk in _line_chunks(file):
                lines = chunk.count(b"\n")
                try:
                    table = pa_json.read_json(io.BytesIO(chunk))
                except pa.ArrowInvalid as exc:
                    raise BulkInputError(
                        f"{file} (lines {line}-{line + lines - 1}): not JSON Lines: {exc}"
                    ) from None
                line += lines
                yield from table.to_batches(max_chunksize=BATCH_ROWS)


def _line_chunks(path: Path) -> Iterator[bytes]:
    """The file in pieces of about :data:`JSONL_CHUNK_BYTES`, each ending after a newline."""
    carry = b""
    with path.open("rb") as stream:
        while block := stream.read(JSONL_CHUNK_BYTES):
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            carry = block[cut:]
            if block[:cut].strip():
                yield block[:cut]
    if carry.strip():
        yield carry + b"\n"


class _CsvSource(_Source):
    """CSV with a header row; every column is read as text, exactly as written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._files = _files(path)
        names: list[str] | None = None
        for file in self._files:
            found = self._open(file).schema.names
            if names is not None and found != names:
                raise BulkInputError(f"{file}: columns {found} differ from the other CSV files'")
            names = found
        self._names = names or []

    @staticmethod
    def _open(file: Path, names: Sequence[str] | None = None) -> pa_csv.CSVStreamingReader:
        convert = pa_csv.ConvertOptions(
            column_types={name: pa.string() for name in names or ()},
            strings_can_be_null=False,
        )
        try:
            return pa_csv.open_csv(file, convert_options=convert)
        except pa.ArrowInvalid as exc:
            raise BulkInputError(f"{file}: not CSV: {exc}") from None

    def schema(self) -> pa.Schema:
        return pa.schema([(name, pa.string()) for name in self._names])

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        for file in self._files:
            try:
                yield from self._open(file, self._names)
            except pa.ArrowInvalid as exc:
                raise BulkInputError(f"{file}: not CSV: {exc}") from None


class _TextSource(_Source):
    """One document per file, read as UTF-8 exactly as stored (``\\r\\n`` kept).

    Ids are the paths relative to the folder given (or the path as given for a file).
    """

    def __init__(self, path: Path, id_column: str, text_column: str) -> None:
        super().__init__(path)
        self._schema = pa.schema([(id_column, pa.string()), (text_column, pa.string())])
        self._files = _files(path)

    def schema(self) -> pa.Schema:
        return self._schema

    def count(self) -> int:
        return len(self._files)

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        size = 16  # whole documents: few at a time
        for start in range(0, len(self._files), size):
            files = self._files[start : start + size]
            ids = [
                str(f.relative_to(self.path)) if self.path.is_dir() else str(self.path)
                for f in files
            ]
            yield pa.record_batch(
                [pa.array(ids, pa.string()), pa.array([_read_text(f) for f in files], pa.string())],
                schema=self._schema,
            )


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BulkInputError(f"{path}: not UTF-8 text ({exc})") from None


def unify(schemas: Sequence[pa.Schema], what: str = "the inputs") -> pa.Schema:
    """One schema for batches that may differ (missing columns become null, types widen)."""
    try:
        return pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise BulkInputError(f"{what}: columns are not compatible: {exc}") from None


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns (absent ones null, types cast)."""
    columns = []
    for field in schema:
        index = batch.schema.get_field_index(field.name)
        if index < 0:
            columns.append(pa.nulls(batch.num_rows, field.type))
            continue
        column = batch.column(index)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise BulkInputError(f"column {field.name!r}: {exc}") from None
        columns.append(column)
    return pa.record_batch(columns, schema=schema)


@dataclass(frozen=True)
class DocumentBatch:
    """Consecutive documents: their rows (the corpus schema), ids and texts."""

    rows: pa.RecordBatch
    ids: list[str]
    texts: list[str | None]
    first: int  # position of the first document in the corpus

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class CorpusInfo:
    """What :meth:`CorpusReader.scan` found."""

    schema: pa.Schema
    documents: int
    id_column: str | None


class CorpusReader:
    """A corpus from one or more inputs, read as :class:`DocumentBatch` es.

    ``id_column=None`` uses a column named ``id`` when there is one, else the
    row's position in the corpus. Document ids must be unique.
    """

    def __init__(
        self,
        inputs: Sequence[Path],
        *,
        fmt: Format = "auto",
        id_column: str | None = None,
        text_column: str = "text",
    ) -> None:
        if not inputs:
            raise BulkInputError("no input given")
        self.text_column = text_column
        self._id_column = id_column
        self._sources: list[_Source] = []
        for path in inputs:
            if not path.exists():
                raise BulkInputError(f"input {path} does not exist")
            kind = detect_format(path) if fmt == "auto" else fmt
            if kind == "parquet":
                self._sources.append(_ParquetSource(path))
            elif kind == "jsonl":
                self._sources.append(_JsonlSource(path))
            elif kind == "csv":
                self._sources.append(_CsvSource(path))
            else:
                self._sources.append(_TextSource(path, id_column or DEFAULT_ID_COLUMN, text_column))
        self._info: CorpusInfo | None = None

    def scan(self) -> CorpusInfo:
        """Check the columns and ids, count the documents (once; reads every input)."""
        if self._info is not None:
            return self._info
        schemas = [s for s in (source.schema() for source in self._sources) if s.names]
        if not schemas:
            raise BulkInputError("the inputs hold no documents")
        schema = unify(schemas)
        text = self.text_column
        if text not in schema.names:
            raise BulkInputError(
                f"no text column {text!r} (columns: {', '.join(schema.names)}); "
                "choose one with --text-column"
            )
        text_type = schema.field(text).type
        if not (
            pa.types.is_string(text_type)
            or pa.types.is_large_string(text_type)
            or pa.types.is_null(text_type)
        ):
            raise BulkInputError(f"text column {text!r} holds {text_type}, not strings")
        id_column = self._id_column
        if id_column is None and DEFAULT_ID_COLUMN in schema.names:
            id_column = DEFAULT_ID_COLUMN
        if id_column is not None and id_column not in schema.names:
            raise BulkInputError(f"no id column {id_column!r} (columns: {', '.join(schema.names)})")
        documents = self._check_ids(id_column)
        self._info = CorpusInfo(schema, documents, id_column)
        return self._info

    def _raw(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        for source in self._sources:
            wanted = None
            if columns is not None:
                names = set(source.schema().names)
                wanted = [c for c in columns if c in names]
            yield from source.batches(wanted)

    def _check_ids(self, id_column: str | None) -> int:
        """Count the documents; refuse null or repeated ids (8 bytes per document held)."""
        if id_column is None:
            return sum(source.count() for source in self._sources)
        keys: list[np.ndarray] = []
        count = 0
        for batch in self._raw([id_column]):
            ids = _ids_of(batch, id_column, count)
            keys.append(np.array([int(doc_key(i), 16) for i in ids], dtype=np.uint64))
            count += len(ids)
        everything = np.sort(np.concatenate(keys)) if keys else np.array([], np.uint64)
        repeated = everything[1:][everything[1:] == everything[:-1]]
        if len(repeated):
            raise BulkInputError(
                "document ids must be unique; repeated: "
                + ", ".join(map(repr, self._ids_with_keys(id_column, set(repeated.tolist()))))
            )
        return count

    def _ids_with_keys(self, id_column: str, keys: set[int]) -> list[str]:
        found: dict[str, None] = {}
        for batch in self._raw([id_column]):
            for doc_id in _ids_of(batch, id_column, 0):
                if int(doc_key(doc_id), 16) in keys:
                    found[doc_id] = None
                    if len(found) >= 5:
                        return list(found)
        return list(found)

    def documents(self) -> Iterator[DocumentBatch]:
        """Every document in order, in batches of at most :data:`BATCH_ROWS`."""
        info = self.scan()
        position = 0
        for raw in self._raw():
            rows = conform(raw, info.schema)
            if info.id_column is None:
                ids = [str(i) for i in range(position, position + rows.num_rows)]
            else:
                ids = _ids_of(rows, info.id_column, position)
            texts = rows.column(self.text_column).to_pylist()
            yield DocumentBatch(rows, ids, texts, position)
            position += rows.num_rows


def _ids_of(batch: pa.RecordBatch, id_column: str, first: int) -> list[str]:
    raw = batch.column(id_column).to_pylist()
    for offset, value in enumerate(raw):
        if value is None:
            raise BulkInputError(
                f"id column {id_column!r} has an empty (null) id (document {first + offset})"
            )
    return [str(v) for v in raw]
