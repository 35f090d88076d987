"""A prepared document: literal bytes, translatable runs and protected spans.

Every format parser (plain text, ICU, HTML/XML, Markdown) turns its input
into a :data:`Doc`: a sequence of :class:`Literal` pieces (kept byte for
byte) and :class:`Run` pieces (translated). A run is one engine segment: its
text parts go to the model, and each :class:`Span` inside it (an inline tag,
a placeholder, a URL, a glossary term, ...) travels as a placeholder token
``⟦n⟧`` and is put back from its own content, which is again a :data:`Doc`
(so an ``<img alt=...>`` tag or an ICU plural block can hold runs of its own).

Runs are numbered in one fixed depth-first order (:func:`runs`), the order
in which :func:`render` consumes their translations.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal as TypingLiteral

from pipeline.fidelity.tokens import TOKEN_RE, token

# a letter or digit, exactly as ``str.isalnum`` has it (``\w`` less the underscore)
_ALNUM = re.compile(r"[^\W_]")

SpanKind = TypingLiteral["open", "close", "opaque", "term", "newline"]


@dataclass(frozen=True, slots=True)
class Literal:
    """Source text kept exactly as it is."""

    raw: str


@dataclass(frozen=True, slots=True)
class TermHit:
    """A glossary or do-not-translate term applied to the text."""

    source: str
    target: str | None  # None: do not translate


@dataclass(frozen=True, slots=True)
class Span:
    """A protected piece of a run, rendered from ``content`` and never translated itself.

    ``kind`` ``open``/``close`` mark the two halves of an inline element
    (``group`` links them, for the nesting check); ``newline`` spans travel
    as a line break rather than a token (the engine keeps line structure);
    ``term`` spans carry the glossary ``hit`` they apply.
    """

    content: Doc
    kind: SpanKind = "opaque"
    group: int | None = None
    hit: TermHit | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Run:
    """One engine segment: text parts and spans; ``escape`` writes translated text back."""

    parts: tuple[str | Span, ...]
    escape: Callable[[str], str] = field(default=lambda text: text)

    def spans(self) -> list[Span]:
        """The spans in order; span ``i`` travels as ``token(i)``."""
        return [p for p in self.parts if isinstance(p, Span)]

    def engine_text(self) -> str:
        """The text the engine sees: text parts, tokens for spans, line breaks for newlines."""
        out: list[str] = []
        index = 0
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            out.append("\n" if part.kind == "newline" else token(index))
            index += 1
        return "".join(out)

    def has_text(self) -> bool:
        """False for runs with nothing a model could translate (no letter or digit)."""
        return any(isinstance(p, str) and _ALNUM.search(p) is not None for p in self.parts)


Doc = tuple["Literal | Run", ...]


def literal_doc(raw: str) -> Doc:
    """A document that is one literal."""
    return (Literal(raw),)


def runs(doc: Doc) -> Iterator[Run]:
    """Every run of ``doc``, spans' runs included, in render order."""
    for node in doc:
        if isinstance(node, Run):
            yield node
            for span in node.spans():
                yield from runs(span.content)


def hits(doc: Doc) -> Iterator[TermHit]:
    """Every glossary term applied anywhere in ``doc``."""
    for run in runs(doc):
        for span in run.spans():
            if span.hit is not None:
                yield span.hit


def source_text(doc: Doc) -> str:
    """The document as it was parsed (every run untranslated): the parser's round trip."""
    return render(doc, [r.engine_text() for r in runs(doc)])


def render(doc: Doc, outputs: Sequence[str]) -> str:
    """The final text: ``outputs[i]`` is run ``i``'s engine output (with its tokens).

    Outputs must already have passed :func:`pipeline.fidelity.quality.check_run`
    (every token exactly once, as many line breaks as the source).
    """
    it = iter(outputs)
    text = _render(doc, it)
    if next(it, None) is not None:
        raise ValueError("more outputs than runs")
    return text


def _render(doc: Doc, outputs: Iterator[str]) -> str:
    out: list[str] = []
    for node in doc:
        if isinstance(node, Literal):
            out.append(node.raw)
            continue
        translated = next(outputs)
        spans = node.spans()
        rendered = [_render(span.content, outputs) for span in spans]
        out.append(_fill(node, translated, spans, rendered))
    return "".join(out)


def _line_breaks(run: Run, spans: list[Span], rendered: list[str]) -> list[str]:
    """What each line break of the engine text stands for, in order."""
    breaks: list[str] = []
    index = 0
    for part in run.parts:
        if isinstance(part, str):
            breaks.extend("\n" * part.count("\n"))
            continue
        if part.kind == "newline":
            breaks.append(rendered[index])
        index += 1
    return breaks


def _fill(run: Run, translated: str, spans: list[Span], rendered: list[str]) -> str:
    breaks = iter(_line_breaks(run, spans, rendered))
    pieces: list[str] = []
    for i, line in enumerate(translated.split("\n")):
        if i:
            pieces.append(next(breaks))
        last = 0
        for m in TOKEN_RE.finditer(line):
            pieces.append(run.escape(line[last : m.start()]))
            pieces.append(rendered[int(m.group(1))])
            last = m.end()
        pieces.append(run.escape(line[last:]))
    return "".join(pieces)
