"""HTML and XML documents: translate text and translatable attributes, keep the rest.

The input is first checked by a strict parser (html5lib for HTML, lxml for
XML); markup it rejects is :class:`BadMarkup`. It is then walked with the
standard library's HTML tokenizer, which reports where every tag, comment
and entity starts, so everything that is not text is kept byte for byte.

* Block elements end a segment; inline elements (``<b>``, ``<a>``,
  ``<span>``, ...) stay inside the sentence as placeholder pairs, so the
  sentence is translated as one unit. In XML, an element is inline when its
  parent has text of its own (mixed content).
* ``<script>``, ``<style>``, ``<code>``, ``<pre>`` and any element marked
  ``translate="no"`` (or ``its:translate="no"``) are kept whole: a block one
  as it stands, an inline one as a single placeholder.
* Entity and character references are kept as written (placeholders).
* Translatable attributes (``alt``, ``title``, ``placeholder``,
  ``aria-label`` by default) are segments of their own, written back with
  the attribute's quoting.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Literal as TypingLiteral

from pipeline.fidelity.document import Doc, Literal, Run, Span, SpanKind, literal_doc, source_text

MarkupFormat = TypingLiteral["html", "xml"]

INLINE_HTML = frozenset(
    {
        *("a", "abbr", "acronym", "b", "bdi", "bdo", "big", "br", "cite", "code", "data"),
        *("del", "dfn", "em", "font", "i", "img", "input", "ins", "kbd", "label", "mark"),
        *("q", "rp", "rt", "ruby", "s", "samp", "small", "span", "strike", "strong", "sub"),
        *("sup", "time", "tt", "u", "var", "wbr"),
    }
)
VOID_HTML = frozenset(
    {
        *("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"),
        *("param", "source", "track", "wbr"),
    }
)
NEVER_TRANSLATED = frozenset({"script", "style", "code", "pre"})
DEFAULT_ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")


class BadMarkup(ValueError):
    """The input is not well-formed markup of its declared format."""


# -- strict checks ---------------------------------------------------------------------------

# html5lib reports these for valid fragments and documents; they are not structure errors.
_HTML_TOLERATED = frozenset(
    {
        "expected-doctype-but-got-start-tag",
        "expected-doctype-but-got-chars",
        "expected-doctype-but-got-eof",
        "unknown-doctype",
    }
)


def check_html(text: str) -> None:
    """Raise :class:`BadMarkup` unless html5lib parses ``text`` without a structure error."""
    import html5lib

    document = bool(re.match(r"\s*(<!doctype|<html[\s>])", text, re.IGNORECASE))
    parser = html5lib.HTMLParser(strict=False)
    if document:
        parser.parse(text)
    else:
        parser.parseFragment(text)
    for (line, col), code, data in parser.errors:
        if code in _HTML_TOLERATED:
            continue
        detail = ", ".join(f"{k}={v}" for k, v in sorted((data or {}).items()))
        raise BadMarkup(f"line {line}, column {col}: {code}" + (f" ({detail})" if detail else ""))


def check_xml(text: str) -> list[bool]:
    """Raise :class:`BadMarkup` unless lxml parses ``text``; returns each element's inline flag.

    A fragment with several top-level elements or bare text is accepted as
    the content of one element. Element ``i`` (document order) is inline
    when its parent has non-blank text of its own.
    """
    from lxml import etree

    raw = text.encode("utf-8")
    is_document = bool(re.match(rb"\s*<\?xml|\s*<!DOCTYPE", raw))
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    try:
        if is_document:
            root = etree.fromstring(raw, parser)
            top = [root]
        else:
            top = list(etree.fromstring(b"<_>" + raw + b"</_>", parser))
    except etree.XMLSyntaxError as exc:
        raise BadMarkup(str(exc)) from None
    flags: list[bool] = []
    for element in top:
        for el in element.iter():
            if not isinstance(el.tag, str):
                continue
            parent = el.getparent()
            flags.append(parent is not None and _mixed(parent))
    return flags


def _mixed(element: object) -> bool:
    text = getattr(element, "text", None) or ""
    tails = "".join((getattr(c, "tail", None) or "") for c in element)  # type: ignore[attr-defined]
    return bool((text + tails).strip())


# -- tokenizing with source offsets ---------------------------------------------------------

EventKind = TypingLiteral["start", "startend", "end", "data", "ref", "other"]


@dataclass(slots=True)
class Event:
    """One tokenizer event: its kind, tag name and attributes, and ``source[start:end]``."""

    kind: EventKind
    start: int
    end: int = 0
    tag: str = ""
    attrs: dict[str, str | None] = field(default_factory=dict)


class _Tokenizer(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.events: list[Event] = []
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.feed(text)
        self.close()
        for event, following in zip(self.events, self.events[1:], strict=False):
            event.end = following.start
        if self.events:
            self.events[-1].end = len(text)

    def _add(
        self, kind: EventKind, tag: str = "", attrs: list[tuple[str, str | None]] | None = None
    ) -> None:
        line, col = self.getpos()
        start = self._line_starts[line - 1] + col
        if self.events and self.events[-1].start == start:
            self.events.pop()  # an empty event at the same offset (e.g. empty data) adds nothing
        self.events.append(Event(kind, start, tag=tag, attrs=dict(attrs or [])))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("startend", tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        self._add("end", tag)

    def handle_data(self, data: str) -> None:
        self._add("data")

    def handle_entityref(self, name: str) -> None:
        self._add("ref")

    def handle_charref(self, name: str) -> None:
        self._add("ref")

    def handle_comment(self, data: str) -> None:
        self._add("other")

    def handle_decl(self, decl: str) -> None:
        self._add("other")

    def handle_pi(self, data: str) -> None:
        self._add("other")

    def unknown_decl(self, data: str) -> None:
        self._add("other")


def tokenize(text: str) -> list[Event]:
    """Events covering ``text`` end to end (``text[e.start:e.end]`` is each one's source)."""
    return _Tokenizer(text).events


def tag_multiset(text: str) -> Counter[tuple[str, str]]:
    """(kind, name) of every tag in ``text``: the same for a source and its translation."""
    return Counter(
        (e.kind, e.tag) for e in tokenize(text) if e.kind in ("start", "startend", "end")
    )


# -- attributes -------------------------------------------------------------------------------

_ATTR = re.compile(r"""(?P<name>[^\s/>"'=]+)(?:\s*=\s*(?P<value>"[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_REF = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);?")
_AMBIGUOUS_AMP = re.compile(r"&(?=[A-Za-z0-9#])")


def escape_html_text(text: str) -> str:
    """Translated text as HTML content: ``<`` and a reference-like ``&`` escaped."""
    return _AMBIGUOUS_AMP.sub("&amp;", text).replace("<", "&lt;")


def escape_xml_text(text: str) -> str:
    """Translated text as XML content."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _attr_escape(quote: str, base: Callable[[str], str]) -> Callable[[str], str]:
    if quote == '"':
        return lambda text: base(text).replace('"', "&quot;")
    if quote == "'":
        return lambda text: base(text).replace("'", "&#39;")
    # unquoted: anything that would end the value becomes a character reference
    return lambda text: re.sub(r"""[\s"'=<>`]""", lambda m: f"&#{ord(m.group(0))};", base(text))


def _ref_parts(raw: str) -> list[str | Span]:
    """Raw text split at entity/character references, which become protected spans."""
    parts: list[str | Span] = []
    last = 0
    for m in _REF.finditer(raw):
        if m.start() > last:
            parts.append(raw[last : m.start()])
        parts.append(Span(literal_doc(m.group(0))))
        last = m.end()
    if last < len(raw):
        parts.append(raw[last:])
    return parts


# -- segmenting --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MarkupOptions:
    """What counts as translatable: attribute names (lower case)."""

    attributes: Sequence[str] = DEFAULT_ATTRIBUTES


def parse_markup(text: str, fmt: MarkupFormat, options: MarkupOptions | None = None) -> Doc:
    """The document of an HTML or XML text; :class:`BadMarkup` when it is malformed."""
    options = options or MarkupOptions()
    if fmt == "html":
        check_html(text)
        inline_flags: list[bool] | None = None
    else:
        inline_flags = check_xml(text)
    segmenter = _Segmenter(text, fmt, options, inline_flags)
    doc = segmenter.run()
    if source_text(doc) != text:  # the walk must lose nothing: refuse rather than mangle
        raise BadMarkup("cannot segment this markup without changing it")
    return doc


def check_output(source: str, output: str, fmt: MarkupFormat) -> str | None:
    """Why ``output`` is not a faithful translation of ``source`` markup, or None."""
    try:
        check_html(output) if fmt == "html" else check_xml(output)
    except BadMarkup as exc:
        return f"translation is not well-formed: {exc}"
    if tag_multiset(source) != tag_multiset(output):
        return "translation does not have the same tags as the source"
    return None


class _Segmenter:
    def __init__(
        self, text: str, fmt: MarkupFormat, options: MarkupOptions, inline_flags: list[bool] | None
    ) -> None:
        self.text = text
        self.fmt = fmt
        self.attributes = frozenset(a.lower() for a in options.attributes)
        self.escape_text = escape_html_text if fmt == "html" else escape_xml_text
        self.events = tokenize(text)
        self.inline_flags = inline_flags
        self.element_index = 0
        self.doc: list[Literal | Run] = []
        self.parts: list[str | Span] = []
        self.groups = 0
        self.open_groups: list[tuple[str, int]] = []

    def raw(self, event: Event) -> str:
        return self.text[event.start : event.end]

    def run(self) -> Doc:
        i = 0
        while i < len(self.events):
            i = self.step(i)
        self.flush()
        return tuple(self.doc)

    def is_inline(self, event: Event) -> bool:
        if self.inline_flags is None:
            return event.tag in INLINE_HTML
        index = self.element_index
        return index < len(self.inline_flags) and self.inline_flags[index]

    def step(self, i: int) -> int:
        event = self.events[i]
        raw = self.raw(event)
        if event.kind == "data":
            self.parts.append(raw)
        elif event.kind == "ref":
            self.parts.append(Span(literal_doc(raw)))
        elif event.kind == "other":
            if self.parts:
                self.parts.append(Span(literal_doc(raw)))
            else:
                self.doc.append(Literal(raw))
        elif event.kind in ("start", "startend"):
            inline = self.is_inline(event)
            self.element_index += 1
            if self.untranslated(event):
                return self.keep_whole(i, inline)
            tag_doc = self.tag_doc(event, raw)
            void = event.kind == "startend" or (self.fmt == "html" and event.tag in VOID_HTML)
            if not inline:
                self.flush()
                self.doc.extend(tag_doc)
            elif void:
                self.parts.append(Span(tag_doc))
            else:
                self.groups += 1
                self.open_groups.append((event.tag, self.groups))
                self.parts.append(Span(tag_doc, "open", self.groups))
        else:  # end tag
            group = self.close_group(event.tag)
            if group is None:
                self.flush()
                self.doc.append(Literal(raw))
            else:
                self.parts.append(Span(literal_doc(raw), "close", group))
        return i + 1

    def close_group(self, tag: str) -> int | None:
        for k in range(len(self.open_groups) - 1, -1, -1):
            if self.open_groups[k][0] == tag:
                group = self.open_groups[k][1]
                del self.open_groups[k:]
                return group
        return None

    def untranslated(self, event: Event) -> bool:
        if event.tag in NEVER_TRANSLATED and self.fmt == "html":
            return True
        return any(
            (name == "translate" or name.endswith(":translate")) and (value or "").lower() == "no"
            for name, value in event.attrs.items()
        )

    def keep_whole(self, i: int, inline: bool) -> int:
        """The element starting at event ``i``, up to its end tag, kept as written."""
        event = self.events[i]
        end = i + 1
        void = event.kind == "startend" or (self.fmt == "html" and event.tag in VOID_HTML)
        if not void:
            depth = 1
            while end < len(self.events) and depth:
                e = self.events[end]
                if e.kind in ("start", "startend"):
                    self.element_index += 1
                if e.tag == event.tag and e.kind == "start":
                    depth += 1
                elif e.tag == event.tag and e.kind == "end":
                    depth -= 1
                end += 1
        raw = self.text[event.start : self.events[end - 1].end]
        if inline:
            self.parts.append(Span(literal_doc(raw)))
        else:
            self.flush()
            self.doc.append(Literal(raw))
        return end

    def tag_doc(self, event: Event, raw: str) -> Doc:
        """A start tag: literal, with each translatable attribute value as a run of its own."""
        nodes: list[Literal | Run] = []
        last = 0
        name_end = re.match(r"<[^\s/>]*", raw)
        pos = name_end.end() if name_end else 0
        for m in _ATTR.finditer(raw, pos):
            value = m.group("value")
            if value is None or m.group("name").lower() not in self.attributes:
                continue
            quoted = value[:1] in ("'", '"')
            v_start = m.start("value") + (1 if quoted else 0)
            v_end = m.end("value") - (1 if quoted else 0)
            parts = _ref_parts(raw[v_start:v_end])
            run = Run(tuple(parts), _attr_escape(value[0] if quoted else "", self.escape_text))
            if not run.has_text():
                continue
            nodes.append(Literal(raw[last:v_start]))
            nodes.append(run)
            last = v_end
        nodes.append(Literal(raw[last:]))
        return tuple(n for n in nodes if not (isinstance(n, Literal) and not n.raw))

    def flush(self) -> None:
        """End the current segment: a run when it has text, its source otherwise."""
        self.open_groups.clear()
        if not self.parts:
            return
        parts = _pair_spans(self.parts)
        self.parts = []
        run = Run(tuple(parts), self.escape_text)
        if run.has_text():
            self.doc.append(run)
            return
        for part in parts:  # nothing to translate here, but a tag may have an attribute to
            self.doc.extend((Literal(part),) if isinstance(part, str) else part.content)


def _pair_spans(parts: list[str | Span]) -> list[str | Span]:
    """Open/close spans whose partner is not in the same segment become opaque."""
    counts = Counter(p.group for p in parts if isinstance(p, Span) and p.kind in ("open", "close"))
    out: list[str | Span] = []
    for p in parts:
        if isinstance(p, Span) and p.kind in ("open", "close") and counts[p.group] != 2:
            kind: SpanKind = "opaque"
            p = Span(p.content, kind)
        out.append(p)
    return out
