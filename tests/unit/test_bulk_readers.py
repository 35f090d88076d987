"""Corpus readers: Parquet files and datasets, JSON Lines, plain-text files and folders."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bulk import BulkError
from pipeline.bulk.readers import corpus_from_table, detect_format, read_corpus


def test_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["Hi.", None], "n": [1, 2]}), path)
    corpus = read_corpus([path])
    assert corpus.ids == ["a", "b"]
    assert corpus.texts == ["Hi.", None]
    assert corpus.table.column_names == ["id", "text", "n"]
    assert corpus.id_column == "id"


def test_parquet_dataset_folder_in_file_order(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    pq.write_table(pa.table({"doc": [3, 4], "body": ["c", "d"]}), folder / "part-1.parquet")
    pq.write_table(pa.table({"doc": [1, 2], "body": ["a", "b"]}), folder / "part-0.parquet")
    assert detect_format(folder) == "parquet"
    corpus = read_corpus([folder], id_column="doc", text_column="body")
    assert corpus.ids == ["1", "2", "3", "4"]
    assert corpus.texts == ["a", "b", "c", "d"]


def test_jsonl_without_ids_uses_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    rows = [{"text": "Hello 😀.", "lang": "en"}, {"text": "世界。", "lang": "zh"}, {"text": ""}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    corpus = read_corpus([path])
    assert corpus.ids == ["0", "1", "2"]
    assert corpus.texts == ["Hello 😀.", "世界。", ""]
    assert corpus.id_column is None


def test_several_inputs_concatenate_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"id": "x", "text": "one"}\n', "utf-8")
    b.write_text('{"id": "y", "text": "two", "extra": 1}\n', "utf-8")
    corpus = read_corpus([b, a])
    assert corpus.ids == ["y", "x"]
    assert corpus.table.column("extra").to_pylist() == [1, None]


def test_text_folder_one_document_per_file(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "b.txt").write_bytes(b"Line one.\r\nLine two.\r\n")
    (root / "sub" / "a.md").write_bytes("日本語。\n\n😀".encode())
    (root / ".hidden").write_text("skip me")
    (root / "empty.txt").write_bytes(b"")
    corpus = read_corpus([root])
    assert corpus.ids == ["b.txt", "empty.txt", "sub/a.md"]
    assert corpus.texts == ["Line one.\r\nLine two.\r\n", "", "日本語。\n\n😀"]


def test_text_file_id_is_the_path_as_given(tmp_path: Path) -> None:
    path = tmp_path / "note.txt"
    path.write_text("Hi.", "utf-8")
    corpus = read_corpus([path], fmt="text")
    assert corpus.ids == [str(path)]


def test_not_utf8_text_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(BulkError, match="not UTF-8"):
        read_corpus([path])


@pytest.mark.parametrize(
    ("table", "kwargs", "message"),
    [
        (pa.table({"body": ["x"]}), {}, "no text column"),
        (pa.table({"text": [1]}), {}, "not strings"),
        (pa.table({"text": ["a"]}), {"id_column": "key"}, "no id column"),
        (pa.table({"id": ["a", "a"], "text": ["x", "y"]}), {}, "unique"),
        (pa.table({"id": ["a", None], "text": ["x", "y"]}), {}, "null"),
    ],
)
def test_bad_columns(table: pa.Table, kwargs: dict, message: str) -> None:
    with pytest.raises(BulkError, match=message):
        corpus_from_table(table, **kwargs)


def test_missing_input(tmp_path: Path) -> None:
    with pytest.raises(BulkError, match="does not exist"):
        read_corpus([tmp_path / "nope.parquet"])
