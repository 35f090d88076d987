"""The split policy for text longer than a model's limit: nothing lost, nothing over."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.engine.segment import split_text


def chars(s: str) -> int:
    return len(s)


def joined(pieces) -> str:
    return "".join(p.lead + p.core + p.trail for p in pieces)


@given(
    text=st.text(alphabet=st.sampled_from("ab .!?\n\t…。x"), max_size=400), limit=st.integers(1, 60)
)
def test_split_is_lossless_and_within_limit(text, limit):
    pieces = split_text(text, chars, limit)
    assert joined(pieces) == text
    for p in pieces:
        assert len(p.core) <= limit
        assert p.core == p.core.strip()


def test_short_text_is_one_piece():
    (piece,) = split_text("  Hello world.  ", chars, 100)
    assert (piece.lead, piece.core, piece.trail) == ("  ", "Hello world.", "  ")


def test_lines_are_separate_pieces():
    pieces = split_text("One.\nTwo!\n", chars, 100)
    assert [p.core for p in pieces] == ["One.", "Two!"]
    assert joined(pieces) == "One.\nTwo!\n"


def test_long_line_splits_at_sentence_boundaries():
    text = "Aaa bbb. Ccc ddd! Eee fff? Ggg."
    pieces = split_text(text, chars, 17)
    assert [p.core for p in pieces] == ["Aaa bbb.", "Ccc ddd!", "Eee fff?", "Ggg."]
    assert [p.trail for p in pieces] == [" ", " ", " ", ""]
    (whole,) = split_text(text, chars, 100)  # short enough: one piece, one model call
    assert whole.core == text


def test_sentence_over_limit_splits_between_words_then_characters():
    pieces = split_text("alpha beta gamma", chars, 10)
    assert [p.core for p in pieces] == ["alpha beta", "gamma"]
    pieces = split_text("abcdefghij", chars, 4)
    assert [p.core for p in pieces] == ["abcd", "efgh", "ij"]


def test_long_sentence_costs_few_counts():
    # 3,000 words in one sentence: one count per word on an ever longer string
    # was quadratic work; galloping needs a few counts per piece
    text = " ".join(f"w{i % 97}" for i in range(3000))
    calls = []

    def counting(s: str) -> int:
        calls.append(len(s))
        return len(s)

    pieces = split_text(text, counting, 200)
    assert joined(pieces) == text
    assert all(len(p.core) <= 200 for p in pieces)
    # same pieces as greedy filling: every piece but the last is full up to a word
    assert all(len(p.core) + 1 + 4 > 200 for p in pieces[:-1])
    assert len(calls) < 20 * len(pieces)
    assert sum(calls) < 40 * len(text)  # characters counted: linear in the text, not quadratic
