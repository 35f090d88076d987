"""SubRip files in file translations: cues in, a corpus out, the same cues composed back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.gateway.calls import ApiError
from pipeline.gateway.files import compose_cues, parse_cues, write_cues

SUBTITLES = (
    "1\n00:00:01,000 --> 00:00:02,500\nHello world.\n\n"
    "2\n00:00:03,000 --> 00:00:04,200\nSee you\nsoon.\n\n"
    "7\n00:01:00,000 --> 00:01:02,000\n<i>Goodbye.</i>\n\n"
)


def test_each_cue_is_one_document_and_comes_back_in_its_place(tmp_path: Path) -> None:
    cues = parse_cues(SUBTITLES)
    corpus = tmp_path / "cues.jsonl"
    ids = write_cues(cues, corpus)
    documents = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines()]
    # a cue's screen lines are one sentence
    assert documents == [
        {"id": "0", "text": "Hello world."},
        {"id": "1", "text": "See you soon."},
        {"id": "2", "text": "<i>Goodbye.</i>"},
    ]
    assert ids == ["0", "1", "2"]
    translated = compose_cues(cues, {"0": "Hallo Welt.", "1": "Bis bald.", "2": "<i>Tschüss.</i>"})
    # numbers (not renumbered) and times are kept
    assert translated == (
        "1\n00:00:01,000 --> 00:00:02,500\nHallo Welt.\n\n"
        "2\n00:00:03,000 --> 00:00:04,200\nBis bald.\n\n"
        "7\n00:01:00,000 --> 00:01:02,000\n<i>Tschüss.</i>\n\n"
    )


def test_a_cue_without_translation_keeps_its_text(tmp_path: Path) -> None:
    cues = parse_cues(SUBTITLES)
    assert compose_cues(cues, {"1": "Bis bald."}) == SUBTITLES.replace(
        "See you\nsoon.", "Bis bald."
    )


def test_a_file_without_cues_has_nothing_to_translate(tmp_path: Path) -> None:
    corpus = tmp_path / "cues.jsonl"
    assert write_cues(parse_cues(""), corpus) == []
    assert corpus.read_text(encoding="utf-8") == ""
    assert compose_cues([], {}) == ""


@pytest.mark.parametrize(
    "text",
    [
        "just some words\n",
        # a cue whose time is not one
        "1\n00:00:01,000 --> 00:00:02,500\nHello.\n\n2\n00:00:0x,000 --> 00:00:03,000\nBye.\n",
    ],
)
def test_text_that_is_not_subtitles_is_refused_with_where(text: str) -> None:
    with pytest.raises(ApiError) as refused:
        parse_cues(text)
    assert refused.value.status == 400
    assert refused.value.message.startswith("Invalid request: not a SubRip (.srt) file: at ")
    assert "is not a cue" in refused.value.message
