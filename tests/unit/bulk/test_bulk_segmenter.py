"""The bulk segmenter: sentences out, the exact document back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.bulk.segmenter import Segment, Segmentation, segment_document

CASES = [
    "",
    " ",
    "\n\n",
    "Hello world.",
    "  Hello world.  ",
    "One. Two! Three? Four… five",
    "First paragraph. Still first.\n\nSecond paragraph.\n",
    "Windows line ends.\r\nNext line.\r\n\r\nNew paragraph.\r\n",
    "Tabs\tand   runs   of spaces.    Next.\t\n",
    "Emoji 😀 inside. 🎉🎉 Party! 👩‍👩‍👧 family.",
    "今天天气很好。我们去公园吧！好的？",
    "「你好。」他说。 Then English.",
    "日本語の文です。次の文。",
    "Dr. Smith and Mrs. Jones met J. R. Tolkien, e.g. at home. They left.",
    "Pi is 3.14 exactly. Version 2.0.1 shipped.",
    'He said "stop." Then he went. (Really.) Yes.',
    "no terminal punctuation at all",
    "line\u2028separator and\u2029paragraph separator\x0bvertical\x0cfeed",
    "\u3000Ideographic\u3000space.\u3000Next.",
    "a\n",
    "...",
    "?! ?! ?!",
]


@pytest.mark.parametrize("text", CASES)
def test_reassembles_exactly(text: str) -> None:
    seg = segment_document(text)
    assert seg.source() == text
    for s in seg.segments:
        assert s.text and s.text == s.text.strip()
        assert not s.lead.strip()


@pytest.mark.parametrize("text", ["", "   ", "\r\n\r\n", "\t"])
def test_empty_documents_have_no_segments(text: str) -> None:
    seg = segment_document(text)
    assert seg.segments == ()
    assert seg.tail == text
    assert seg.join([]) == text


def test_sentences_and_paragraphs() -> None:
    seg = segment_document("One. Two!  Three\r\n\r\nFour?\n")
    assert seg.segments == (
        Segment("", "One."),
        Segment(" ", "Two!"),
        Segment("  ", "Three"),
        Segment("\r\n\r\n", "Four?"),
    )
    assert seg.tail == "\n"
    assert seg.join(["1", "2", "3", "4"]) == "1 2  3\r\n\r\n4\n"


def test_cjk_full_stops_need_no_space() -> None:
    seg = segment_document("今天天气很好。我们去公园吧！好的")
    assert [s.text for s in seg.segments] == ["今天天气很好。", "我们去公园吧！", "好的"]


def test_abbreviations_and_decimals_do_not_end_sentences() -> None:
    seg = segment_document("Dr. Smith paid 3.50 dollars, e.g. J. Doe did. Next one.")
    assert [s.text for s in seg.segments] == [
        "Dr. Smith paid 3.50 dollars, e.g. J. Doe did.",
        "Next one.",
    ]


def test_long_sentences_stay_whole_under_the_byte_limit() -> None:
    sentence = " ".join(["word"] * 2000)  # ~10 KB: longer than the model's limit, fine
    assert [s.text for s in segment_document(sentence).segments] == [sentence]


def test_sentences_over_the_byte_limit_are_cut_between_words() -> None:
    text = ("ab " * 20).strip() + ". " + "😀" * 10
    seg = segment_document(text, max_bytes=16)
    assert seg.source() == text
    assert all(len(s.text.encode()) <= 16 for s in seg.segments)
    assert len(seg.segments) > 3


def test_join_checks_the_count() -> None:
    with pytest.raises(ValueError):
        Segmentation((Segment("", "a"),), "").join([])


_alphabet = st.sampled_from(
    [*"abc XYZ.!?…。！？「」\"')\n\r\t\u3000\u2028", "😀", "👩\u200d👧", "日本", "Dr.", "e.g."]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_alphabet, max_size=60).map("".join), st.integers(min_value=4, max_value=64))
def test_reassembly_property(text: str, max_bytes: int) -> None:
    seg = segment_document(text, max_bytes)
    assert seg.source() == text
    assert all(s.text and s.text == s.text.strip() for s in seg.segments)
    assert all(len(s.text.encode()) <= max_bytes for s in seg.segments)
    assert not seg.tail.strip()


def test_markup_documents_are_one_segment_and_size_checked() -> None:
    from pipeline.bulk import BulkError
    from pipeline.bulk.segmenter import segment_for_format

    doc = "\n  <p>One. Two.</p>\n<p>Three.</p>  \n"
    seg = segment_for_format(doc, "html", 1024)
    assert [s.text for s in seg.segments] == ["<p>One. Two.</p>\n<p>Three.</p>"]
    assert seg.source() == doc
    assert len(segment_for_format(doc, "text", 1024).segments) == 3
    with pytest.raises(BulkError, match="request limit"):
        segment_for_format(doc, "markdown", 10)
