"""ICU MessageFormat: keep the syntax, translate the messages.

``You have {count, plural, one {# message} other {# messages}}.`` becomes a
run ``You have ⟦0⟧.`` whose span keeps ``{count, plural, one {``…``} other
{``…``}}`` byte for byte and holds one run per sub-message (``⟦0⟧ message``,
with ``#`` protected). Simple arguments (``{name}``, ``{n, number}``) are
protected spans. Parsing is pyicumessageformat's: its token stream is
lossless, so the document renders back to the exact input.
"""

from __future__ import annotations

from typing import Any

from pyicumessageformat import Parser

from pipeline.fidelity.document import Doc, Literal, Run, Span, literal_doc

_SUBMESSAGE_TYPES = ("plural", "select", "selectordinal")
_PARSER = Parser({"submessage_types": list(_SUBMESSAGE_TYPES)})


def parse_icu(text: str) -> Doc | None:
    """The ICU document of ``text``, or None when it is not an ICU message with plural/select.

    Plain text that merely has braces (or fails to parse as ICU) is left to
    the placeholder patterns.
    """
    # nearly every text is plain: the parser costs more than the rest of its preparation
    if "{" not in text or not ("plural" in text or "select" in text):
        return None
    tokens: list[dict[str, Any]] = []
    try:
        _PARSER.parse(text, tokens)
    except (SyntaxError, ValueError, TypeError):
        return None
    if not any(t["type"] == "type" and t["text"] in _SUBMESSAGE_TYPES for t in tokens):
        return None
    walker = _Walker(tokens)
    parts = walker.message()
    if walker.pos != len(tokens):
        return None
    return (Run(tuple(parts)),)


class _Walker:
    """Builds runs and spans from the parser's flat token stream."""

    def __init__(self, tokens: list[dict[str, Any]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def _peek(self) -> dict[str, Any] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def message(self) -> list[str | Span]:
        """Parts of one (sub-)message, up to its closing brace (not consumed)."""
        parts: list[str | Span] = []
        while (tok := self._peek()) is not None:
            kind, text = tok["type"], tok["text"]
            if kind == "syntax" and text == "}":
                break
            if kind == "syntax" and text == "{":
                parts.append(self.argument())
                continue
            self.pos += 1
            if kind == "text":
                parts.append(text)
            else:  # '#' in a plural message, or anything else the parser marks
                parts.append(Span(literal_doc(text)))
        return parts

    def argument(self) -> Span:
        """``{name ...}`` as one span; plural/select sub-messages become runs inside it."""
        content: list[Literal | Run] = []
        raw: list[str] = ["{"]
        self.pos += 1
        while (tok := self._peek()) is not None:
            self.pos += 1
            kind, text = tok["type"], tok["text"]
            if kind == "syntax" and text == "}":
                raw.append("}")
                break
            if kind == "syntax" and text == "{":
                raw.append("{")
                content.append(Literal("".join(raw)))
                raw = []
                content.append(Run(tuple(self.message())))
                self.pos += 1  # the sub-message's closing brace
                raw = ["}"]
                continue
            raw.append(text)
        content.append(Literal("".join(raw)))
        return Span(tuple(content))
