"""Cutting documents into sentences that put the document back together exactly.

A document becomes a sequence of :class:`Segment` s plus a ``tail``: each
segment is the separator before a sentence (``lead``: whitespace, line and
paragraph breaks, copied through untranslated) and the sentence itself
(``text``: what gets translated, never empty, no surrounding whitespace).
``lead + text`` over all segments followed by ``tail`` is the document,
byte for byte; putting translations in place of the texts gives the
translated document with the original layout.

Rules:

* Line breaks (``\\n``, ``\\r\\n``, ``\\r``, and the other characters
  :meth:`str.splitlines` breaks at) always end a sentence, so paragraphs and
  line structure survive.
* Within a line, a sentence ends after ``.``, ``!``, ``?`` or ``…`` (plus
  closing quotes or brackets) followed by whitespace, or after a CJK full stop
  ``。！？`` (plus closing marks) whatever follows. A ``.`` after a common
  abbreviation (``Dr.``, ``e.g.``) or a single capital initial does not.
* A sentence longer than the message limit (UTF-8 bytes) is cut between words,
  and a word longer than that between characters (:func:`pipeline.engine.segment.split_text`).
  Sentences merely longer than the model's limit stay whole: the engine cuts
  those itself.
* An empty or whitespace-only document has no segments; its tail is the
  whitespace, which is also its translation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pipeline.engine.segment import split_text

# The characters str.splitlines() breaks at; each ends a sentence.
_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# A line's content: non-space runs joined by horizontal whitespace only.
_LINE = re.compile(rf"\S+(?:[^\S{_BREAKS}]+\S+)*")
_CLOSERS = "\"'”’»)\\]」』）】"
_TERMINAL = re.compile(rf"(?P<latin>[.!?…]+)[{_CLOSERS}]*(?=\s)|[。！？]+[{_CLOSERS}]*")
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "e.g", "i.e", "cf", "no", "fig"}
)


@dataclass(frozen=True, slots=True)
class Segment:
    """One sentence to translate and the separator that comes before it."""

    lead: str
    text: str


@dataclass(frozen=True, slots=True)
class Segmentation:
    """A document as segments plus the whitespace after the last one."""

    segments: tuple[Segment, ...]
    tail: str

    def join(self, texts: Sequence[str]) -> str:
        """The document with ``texts[i]`` in place of segment ``i``'s text."""
        if len(texts) != len(self.segments):
            raise ValueError(f"{len(texts)} texts for {len(self.segments)} segments")
        body = "".join(s.lead + t for s, t in zip(self.segments, texts, strict=True))
        return body + self.tail

    def source(self) -> str:
        """The original document (reassembled from the segments)."""
        return self.join([s.text for s in self.segments])


def segment_document(text: str, max_bytes: int = 16 * 1024) -> Segmentation:
    """Cut ``text`` into sentences of at most ``max_bytes`` UTF-8 bytes each."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be >= 4 (one UTF-8 character)")
    segments: list[Segment] = []
    pos = 0  # start of the separator not yet given to a segment
    for line in _LINE.finditer(text):
        lead = text[pos : line.start()]
        content = line.group()
        for start, end in _sentence_spans(content):
            sentence = content[start:end]
            core = sentence.lstrip()
            lead += sentence[: len(sentence) - len(core)]
            for piece_lead, piece in _fit(core, max_bytes):
                segments.append(Segment(lead + piece_lead, piece))
                lead = ""
        pos = line.end()
    return Segmentation(tuple(segments), text[pos:])


def segment_whole(text: str, max_bytes: int = 16 * 1024) -> Segmentation:
    """A markup document as one segment: markup must not be cut between sentences.

    Surrounding whitespace stays outside; a document over ``max_bytes`` is a
    :class:`~pipeline.bulk.BulkInputError` (raise ``BABELSTREAM_LIMITS__MAX_TEXT_BYTES``).
    """
    from pipeline.bulk import BulkInputError

    core = text.strip()
    if not core:
        return Segmentation((), text)
    size = len(core.encode("utf-8"))
    if size > max_bytes:
        raise BulkInputError(
            f"a markup document of {size} bytes is over the {max_bytes}-byte request limit "
            "(markup documents travel whole; raise BABELSTREAM_LIMITS__MAX_TEXT_BYTES)"
        )
    start = text.index(core)
    return Segmentation((Segment(text[:start], core),), text[start + len(core) :])


def segment_for_format(text: str, text_format: str, max_bytes: int = 16 * 1024) -> Segmentation:
    """Plain text cut into sentences; html/xml/markdown documents whole."""
    if text_format == "text":
        return segment_document(text, max_bytes)
    return segment_whole(text, max_bytes)


def _sentence_spans(line: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence in one line's content (which has no outer whitespace)."""
    start = 0
    for match in _TERMINAL.finditer(line):
        end = match.end()
        if end >= len(line) or end <= start:
            continue
        if match.group("latin") == "." and _is_abbreviation(line[start : match.start()]):
            continue
        yield start, end
        start = end
    yield start, len(line)


def _is_abbreviation(before: str) -> bool:
    words = before.split()
    word = words[-1] if words else ""
    return word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isupper())


def _fit(core: str, max_bytes: int) -> Iterator[tuple[str, str]]:
    """(extra lead, text) pieces of one sentence, each within ``max_bytes``."""
    if len(core.encode()) <= max_bytes:
        yield "", core
        return
    carry = ""
    for piece in split_text(core, lambda s: len(s.encode()), max_bytes):
        if not piece.core:
            carry += piece.lead + piece.trail
            continue
        yield carry + piece.lead, piece.core
        carry = piece.trail
