"""Prepare: a request's text, format and terms become engine segments.

:func:`prepare` parses the text by its format (plain text, with ICU
plural/select messages recognised; HTML; XML; Markdown), then protects, in
every segment's text, the placeholder forms (:mod:`~pipeline.fidelity.placeholders`)
and the glossary's terms (:mod:`~pipeline.fidelity.glossary`). The result,
:class:`Prepared`, lists the segments the engine must translate;
:mod:`~pipeline.fidelity.restore` turns the engine's outputs back into the
final text.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal as TypingLiteral

from pipeline.fidelity.document import Doc, Literal, Run, Span, literal_doc, runs
from pipeline.fidelity.glossary import Glossary
from pipeline.fidelity.markup import DEFAULT_ATTRIBUTES, BadMarkup, MarkupOptions
from pipeline.fidelity.placeholders import PlaceholderFinder

Format = TypingLiteral["text", "html", "xml", "markdown"]
FORMATS: tuple[Format, ...] = ("text", "html", "xml", "markdown")

__all__ = ["FORMATS", "BadMarkup", "FidelityConfig", "Format", "Prepared", "prepare"]


@dataclass(frozen=True)
class FidelityConfig:
    """What to protect: placeholder patterns and translatable markup attributes."""

    finder: PlaceholderFinder = field(default_factory=PlaceholderFinder)
    attributes: tuple[str, ...] = DEFAULT_ATTRIBUTES

    @classmethod
    def build(
        cls, extra_patterns: Sequence[str] = (), attributes: Sequence[str] = DEFAULT_ATTRIBUTES
    ) -> FidelityConfig:
        """A config with ``extra_patterns`` added to the built-in placeholder forms."""
        return cls(PlaceholderFinder(extra_patterns), tuple(a.lower() for a in attributes))


@dataclass(frozen=True)
class Prepared:
    """A parsed, protected document and the segments the engine must translate."""

    source: str
    fmt: Format
    doc: Doc

    @property
    def runs(self) -> list[Run]:
        """Every run, in render order."""
        return list(runs(self.doc))

    def segments(self) -> list[str]:
        """Engine inputs: the engine text of each run that has something to translate."""
        return [run.engine_text() for run in self.runs if run.has_text()]


def parse(text: str, fmt: Format, config: FidelityConfig) -> Doc:
    """``text`` as a document of its format; :class:`BadMarkup` when it is malformed."""
    if fmt == "text":
        from pipeline.fidelity.icu import parse_icu

        return parse_icu(text) or (Run((text,)),)
    if fmt == "markdown":
        from pipeline.fidelity.markdown import parse_markdown

        return parse_markdown(text)
    from pipeline.fidelity.markup import parse_markup

    return parse_markup(text, fmt, MarkupOptions(config.attributes))


def prepare(
    text: str, fmt: Format, config: FidelityConfig, glossary: Glossary | None = None
) -> Prepared:
    """Parse and protect ``text``; raises :class:`BadMarkup` for malformed markup."""
    doc = parse(text, fmt, config)
    return Prepared(text, fmt, protect(doc, config.finder, glossary))


def protect(doc: Doc, finder: PlaceholderFinder, glossary: Glossary | None) -> Doc:
    """``doc`` with placeholders and glossary terms in every run's text masked as spans."""
    out: list[Literal | Run] = []
    for node in doc:
        if isinstance(node, Literal):
            out.append(node)
            continue
        parts: list[str | Span] = []
        for part in node.parts:
            if isinstance(part, Span):
                parts.append(
                    Span(protect(part.content, finder, glossary), part.kind, part.group, part.hit)
                )
            else:
                parts.extend(protect_text(part, finder, glossary))
        out.append(Run(tuple(parts), node.escape))
    return tuple(out)


def protect_text(
    text: str, finder: PlaceholderFinder, glossary: Glossary | None
) -> list[str | Span]:
    """One text part split into text and protected spans (placeholders, then terms)."""
    text = unicodedata.normalize("NFC", text)
    parts: list[str | Span] = []
    last = 0
    for match in finder.find_spans(text):
        parts.extend(_terms(text[last : match.start], glossary))
        parts.append(Span(literal_doc(text[match.start : match.end])))
        last = match.end
    parts.extend(_terms(text[last:], glossary))
    return parts


def _terms(text: str, glossary: Glossary | None) -> list[str | Span]:
    if not text:
        return []
    if not glossary:
        return [text]
    parts: list[str | Span] = []
    last = 0
    for m in glossary.find(text):
        if m.start > last:
            parts.append(text[last : m.start])
        parts.append(Span(literal_doc(m.replacement), "term", hit=m.hit))
        last = m.end
    if last < len(text):
        parts.append(text[last:])
    return parts
