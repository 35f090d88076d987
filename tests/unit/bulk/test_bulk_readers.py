"""Corpus readers: Parquet files and datasets, JSON Lines, CSV, plain-text files and folders.

Every reader streams record batches; these tests read them all back and
check order, columns, ids and the errors a user meets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bulk import BulkError
from pipeline.bulk import readers as readers_mod
from pipeline.bulk.readers import CorpusReader, detect_format


def read_all(*inputs: Path, **kwargs: object) -> tuple[list[str], list[str | None], pa.Table]:
    reader = CorpusReader(list(inputs), **kwargs)  # type: ignore[arg-type]
    ids: list[str] = []
    texts: list[str | None] = []
    rows = []
    for batch in reader.documents():
        assert batch.first == len(ids)
        ids += batch.ids
        texts += batch.texts
        rows.append(batch.rows)
    table = pa.Table.from_batches(rows, schema=reader.scan().schema)
    assert reader.scan().documents == len(ids)
    return ids, texts, table


def test_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["Hi.", None], "n": [1, 2]}), path)
    ids, texts, table = read_all(path)
    assert (ids, texts) == (["a", "b"], ["Hi.", None])
    assert table.column_names == ["id", "text", "n"]
    assert CorpusReader([path]).scan().id_column == "id"


def test_parquet_dataset_folder_in_file_order(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    pq.write_table(pa.table({"doc": [3, 4], "body": ["c", "d"]}), folder / "part-1.parquet")
    pq.write_table(pa.table({"doc": [1, 2], "body": ["a", "b"]}), folder / "part-0.parquet")
    assert detect_format(folder) == "parquet"
    ids, texts, _ = read_all(folder, id_column="doc", text_column="body")
    assert (ids, texts) == (["1", "2", "3", "4"], ["a", "b", "c", "d"])


def test_large_parquet_comes_in_bounded_batches(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    n = 3 * readers_mod.BATCH_ROWS + 5
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(n)]}), path, row_group_size=1000)
    batches = list(CorpusReader([path]).documents())
    assert all(len(b) <= readers_mod.BATCH_ROWS for b in batches) and len(batches) >= 4
    assert [t for b in batches for t in b.texts] == [f"t{i}" for i in range(n)]
    assert batches[-1].ids[-1] == str(n - 1)


def test_jsonl_without_ids_uses_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    rows = [{"text": "Hello 😀.", "lang": "en"}, {"text": "世界。", "lang": "zh"}, {"text": ""}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    ids, texts, _ = read_all(path)
    assert (ids, texts) == (["0", "1", "2"], ["Hello 😀.", "世界。", ""])
    assert CorpusReader([path]).scan().id_column is None


def test_jsonl_is_read_in_chunks_whose_columns_are_unified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_mod, "JSONL_CHUNK_BYTES", 200)
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"id": f"d{i}", "text": f"text {i}", "score": i}) for i in range(40)]
    lines += [json.dumps({"id": "late", "text": "x", "score": 1.5, "note": "new"})]
    path.write_text("\n".join(lines), "utf-8")  # no newline at the very end
    ids, _, table = read_all(path)
    assert ids == [f"d{i}" for i in range(40)] + ["late"]
    assert table.schema.field("score").type == pa.float64()
    assert table.column("note").to_pylist() == [None] * 40 + ["new"]


def test_bad_jsonl_names_the_lines(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "ok"}\n{"text": oops}\n', "utf-8")
    with pytest.raises(BulkError, match=r"lines 1-2\): not JSON Lines"):
        CorpusReader([path]).scan()


def test_several_inputs_concatenate_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": "x", "text": "one"}\n', "utf-8")
    b.write_text('{"id": "y", "text": "two", "extra": 1}\n', "utf-8")
    ids, _, table = read_all(b, a)
    assert ids == ["y", "x"]
    assert table.column("extra").to_pylist() == [1, None]


def test_csv_keeps_values_as_written(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    path.write_text('id,text,code\n1,"Hello, world.",007\n2,"Two\nlines",\n', "utf-8")
    assert detect_format(path) == "csv"
    ids, texts, table = read_all(path)
    assert (ids, texts) == (["1", "2"], ["Hello, world.", "Two\nlines"])
    assert table.column("code").to_pylist() == ["007", ""]


def test_text_folder_one_document_per_file(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_bytes(b"Line one.\r\nLine two.\r\n")
    (root / "sub" / "a.md").write_bytes("日本語。\n\n😀".encode())
    (root / ".hidden").write_text("skip me")
    (root / "empty.txt").write_bytes(b"")
    ids, texts, _ = read_all(root)
    assert ids == ["b.txt", "empty.txt", "sub/a.md"]
    assert texts == ["Line one.\r\nLine two.\r\n", "", "日本語。\n\n😀"]


def test_text_file_id_is_the_path_as_given(tmp_path: Path) -> None:
    path = tmp_path / "note.txt"
    path.write_text("Hi.", "utf-8")
    assert read_all(path)[0] == [str(path)]


def test_unknown_extensions_are_refused_with_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "corpus.xlsx"
    path.write_text("?", "utf-8")
    with pytest.raises(BulkError, match=r"unknown file type '\.xlsx'; supported: .*\.csv"):
        CorpusReader([path])
    assert read_all(path, fmt="text")[1] == ["?"], "--format text reads any file"


def test_a_folder_must_hold_one_format(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x", "utf-8")
    (tmp_path / "b.csv").write_text("text\nx\n", "utf-8")
    with pytest.raises(BulkError, match="mixes formats"):
        CorpusReader([tmp_path])


def test_not_utf8_text_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(BulkError, match="not UTF-8"):
        read_all(path)


@pytest.mark.parametrize(
    ("table", "kwargs", "message"),
    [
        (pa.table({"body": ["x"]}), {}, "no text column"),
        (pa.table({"text": [1]}), {}, "not strings"),
        (pa.table({"text": ["a"]}), {"id_column": "key"}, "no id column"),
        (pa.table({"id": ["a", "b", "a"], "text": ["x", "y", "z"]}), {}, "unique.*'a'"),
        (pa.table({"id": ["a", None], "text": ["x", "y"]}), {}, "null"),
    ],
)
def test_bad_columns_are_refused_before_anything_runs(
    tmp_path: Path, table: pa.Table, kwargs: dict, message: str
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    with pytest.raises(BulkError, match=message):
        CorpusReader([path], **kwargs).scan()


def test_missing_input(tmp_path: Path) -> None:
    with pytest.raises(BulkError, match="does not exist"):
        CorpusReader([tmp_path / "nope.parquet"])


def test_parquet_hive_partitions_become_columns(tmp_path: Path) -> None:
    for lang, texts in (("de", ["a", "b"]), ("fr", ["c"])):
        folder = tmp_path / "ds" / f"lang={lang}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"text": texts}), folder / "part-0.parquet")
    _, texts, table = read_all(tmp_path / "ds")
    assert texts == ["a", "b", "c"]
    assert table.column("lang").to_pylist() == ["de", "de", "fr"]
