"""Markdown documents: translate paragraphs, headings, list items and table cells.

markdown-it-py (CommonMark plus tables and strikethrough) finds the blocks
and the inline syntax; this module maps its tokens back onto the source so
that everything but text is kept byte for byte:

* code blocks, fences, HTML blocks and rules are never translated;
* emphasis, strong, strikethrough, links and images stay inside the
  sentence as placeholder pairs (``[``…``](url "title")`` keeps its
  destination; an image's alt text is translated);
* code spans, inline HTML, autolinks, backslash escapes and entities are
  protected spans;
* a line break inside a paragraph (with whatever prefix the next line
  carries: ``> ``, indentation) travels as a line break.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from pipeline.fidelity.document import Doc, Literal, Run, Span, SpanKind, literal_doc, source_text
from pipeline.fidelity.markup import BadMarkup

_BREAK = re.compile(r"[ \t]*\\?\n[ \t]*")
_WS = re.compile(r"[ \t\n]*")


@cache
def _parser() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    # keep escapes and entities as tokens of their own, with their source in `markup`
    md.disable("text_join")
    return md


def structure(text: str) -> list[tuple[str, ...]]:
    """Token types (blocks and inline, text left out) — equal for a source and its translation."""
    out: list[tuple[str, ...]] = []
    for tok in _parser().parse(text):
        if tok.type == "inline":
            out.append(tuple(c.type for c in tok.children or [] if c.type != "text"))
        else:
            out.append((tok.type, tok.markup))
    return out


def check_output(source: str, output: str) -> str | None:
    """Why ``output`` does not keep ``source``'s Markdown structure, or None."""
    if structure(source) != structure(output):
        return "translation does not have the same Markdown structure as the source"
    return None


def parse_markdown(text: str) -> Doc:
    """The document of a Markdown text."""
    builder = _Builder(text)
    doc = builder.build()
    if source_text(doc) != text:
        raise BadMarkup("cannot segment this Markdown without changing it")
    return doc


class _Builder:
    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.doc: list[Literal | Run] = []
        self.done = 0  # source offset up to which the document is built
        self.cursor = (0, 0)  # (line, column) where the next inline content may start

    def line(self, index: int) -> tuple[int, str]:
        start = self.line_starts[index]
        end = (
            self.line_starts[index + 1] - 1 if index + 1 < len(self.line_starts) else len(self.text)
        )
        return start, self.text[start:end]

    def build(self) -> Doc:
        for tok in _parser().parse(self.text):
            if tok.type == "inline" and tok.content:
                self.inline(tok)
        if self.done < len(self.text):
            self.doc.append(Literal(self.text[self.done :]))
        return tuple(self.doc)

    def locate(self, tok: Any) -> list[int]:
        """Source offset of every character of ``tok.content``, plus one past its end.

        A ``"\n"`` of the content maps to where its source line's content ends;
        the source from there to the next line's content (trailing spaces, the
        line break, a ``> `` or list prefix) belongs to that ``"\n"``.
        """
        first = tok.map[0] if tok.map else self.cursor[0]
        line_no = first
        col = self.cursor[1] if first == self.cursor[0] else 0
        offsets: list[int] = []
        end = 0
        for k, content_line in enumerate(tok.content.split("\n")):
            if line_no >= len(self.line_starts):
                raise BadMarkup("cannot map Markdown inline content to its source")
            start, raw_line = self.line(line_no)
            found = raw_line.find(content_line, col)
            if found < 0:
                raise BadMarkup("cannot map Markdown inline content to its source")
            if k:
                offsets.append(end)
            offsets.extend(range(start + found, start + found + len(content_line)))
            end = start + found + len(content_line)
            self.cursor = (line_no, found + len(content_line))
            line_no, col = line_no + 1, 0
        offsets.append(end)
        return offsets

    def inline(self, tok: Any) -> None:
        offsets = self.locate(tok)
        start = offsets[0]
        if start < self.done:
            raise BadMarkup("cannot map Markdown inline content to its source")
        if start > self.done:
            self.doc.append(Literal(self.text[self.done : start]))
        walker = _InlineWalker(self.text, tok.content, offsets)
        parts = walker.walk(tok.children or [])
        run = Run(tuple(parts))
        if run.has_text():
            self.doc.append(run)
        else:
            self.doc.append(Literal(source_text((run,))))
        self.done = offsets[-1]


class _InlineWalker:
    """Turns inline tokens into run parts, consuming the content left to right."""

    def __init__(self, text: str, content: str, offsets: list[int]) -> None:
        self.text = text
        self.content = content
        self.offsets = offsets
        self.pos = 0
        self.groups = 0
        self.stack: list[int] = []

    def raw(self, a: int, b: int) -> str:
        """Source text of content ``[a, b)``, line prefixes included."""
        if a == b:
            return ""
        last = b - 1
        stop = self.offsets[last + 1] if self.content[last] == "\n" else self.offsets[last] + 1
        return self.text[self.offsets[a] : stop]

    def take(self, n: int) -> tuple[int, int]:
        a = self.pos
        self.pos += n
        if self.pos > len(self.content):
            raise BadMarkup("cannot map Markdown inline syntax to its source")
        return a, self.pos

    def expect(self, literal: str) -> tuple[int, int]:
        if not self.content.startswith(literal, self.pos):
            raise BadMarkup("cannot map Markdown inline syntax to its source")
        return self.take(len(literal))

    def span(self, a: int, b: int, kind: SpanKind = "opaque", group: int | None = None) -> Span:
        return Span(literal_doc(self.raw(a, b)), kind, group)

    def walk(self, children: Sequence[Any]) -> list[str | Span]:
        parts: list[str | Span] = []
        i = 0
        while i < len(children):
            tok = children[i]
            kind = tok.type
            if kind == "text":
                a, b = self.expect(tok.content)
                parts.append(self.content[a:b])
            elif kind in ("softbreak", "hardbreak"):
                m = _BREAK.match(self.content, self.pos)
                if not m:
                    raise BadMarkup("cannot map a Markdown line break to its source")
                a, b = self.take(m.end() - self.pos)
                parts.append(self.span(a, b, "newline"))
            elif kind == "code_inline":
                a, _ = self.expect(tok.markup)
                close = re.compile(f"(?<!`){re.escape(tok.markup)}(?!`)").search(
                    self.content, self.pos
                )
                if close is None:
                    raise BadMarkup("cannot map a Markdown code span to its source")
                self.pos = close.end()
                parts.append(self.span(a, self.pos))
            elif kind.endswith("_open") and kind != "link_open":
                a, b = self.expect(tok.markup)
                self.groups += 1
                self.stack.append(self.groups)
                parts.append(self.span(a, b, "open", self.groups))
            elif kind.endswith("_close") and kind != "link_close":
                a, b = self.expect(tok.markup)
                parts.append(self.span(a, b, "close", self.stack.pop()))
            elif kind == "link_open" and tok.markup in ("autolink", "linkify"):
                a = self.pos
                depth = 1
                while depth:  # the whole autolink, its text tokens included, is one span
                    i += 1
                    depth += {"link_open": 1, "link_close": -1}.get(children[i].type, 0)
                if tok.markup == "autolink":
                    self.expect("<")
                    end = self.content.index(">", self.pos) + 1
                    self.pos = end
                else:
                    self.expect(tok.attrs.get("href", ""))
                parts.append(self.span(a, self.pos))
            elif kind == "link_open":
                a, b = self.expect("[")
                self.groups += 1
                self.stack.append(self.groups)
                parts.append(self.span(a, b, "open", self.groups))
            elif kind == "link_close":
                a = self.pos
                self.expect("]")
                self.destination()
                parts.append(self.span(a, self.pos, "close", self.stack.pop()))
            elif kind == "image":
                a, b = self.expect("![")
                self.groups += 1
                group = self.groups
                parts.append(self.span(a, b, "open", group))
                parts.extend(self.walk(tok.children or []))
                c = self.pos
                self.expect("]")
                self.destination()
                parts.append(self.span(c, self.pos, "close", group))
            elif kind in ("text_special", "html_inline"):
                a, b = self.expect(tok.markup if kind == "text_special" else tok.content)
                parts.append(self.span(a, b))
            else:
                raise BadMarkup(f"cannot map Markdown token {kind} to its source")
            i += 1
        return parts

    def destination(self) -> None:
        """Consume what follows a link's ``]``: ``(dest "title")``, ``[label]`` or nothing."""
        from markdown_it.helpers import parseLinkDestination, parseLinkTitle

        content, n = self.content, len(self.content)
        if self.content.startswith("(", self.pos):
            p = _WS.match(content, self.pos + 1).end()  # type: ignore[union-attr]
            if p < n and content[p] != ")":
                dest = parseLinkDestination(content, p, n)
                if dest.ok:
                    p = _WS.match(content, dest.pos).end()  # type: ignore[union-attr]
                if p < n and content[p] in "\"'(":
                    title = parseLinkTitle(content, p, n)
                    if title.ok:
                        p = _WS.match(content, title.pos).end()  # type: ignore[union-attr]
            if p >= n or content[p] != ")":
                raise BadMarkup("cannot map a Markdown link destination to its source")
            self.pos = p + 1
        elif self.content.startswith("[", self.pos):
            self.pos = content.index("]", self.pos) + 1
