"""Protected spans in plain text: template placeholders, URLs, e-mails, code.

Each built-in form is one named regular expression; settings may add more
(``BABELSTREAM_FIDELITY__EXTRA_PATTERNS``). :func:`find_spans` returns the
non-overlapping matches, leftmost first and, at one position, the longest.
ICU ``plural``/``select`` blocks are not placeholders: :mod:`pipeline.fidelity.icu`
keeps their syntax and translates their messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.fidelity.tokens import CLOSE, OPEN

# name -> pattern; order breaks ties between matches of equal start and length.
BUILTIN_PATTERNS: dict[str, str] = {
    # the token brackets themselves, should a text contain them
    "token_bracket": f"[{OPEN}{CLOSE}]",
    # Mustache / Handlebars / i18next interpolation: {{x}}, {{{x}}}, {{- x}}, {{x, format}}
    "mustache": r"\{\{\{[^{}]*\}\}\}|\{\{[^{}]*\}\}",
    # i18next nesting: $t(key) and $t(key, {"x": 1})
    "i18next_nesting": r"\$t\([^()]*\)",
    # ICU / Python str.format / .NET simple arguments: {name}, {0}, {x, number}, {0:.2f}, {}
    "brace": r"\{[^{}\s]*(?:[ ,:!][^{}]*)?\}",
    # Python %-format with a mapping key: %(name)s, %(count)05.2f
    "python_percent": r"%\([^()\s]+\)[#0+-]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa]",
    # printf: %s, %d, %1$s, %-5.2f, %lld, %%
    "printf": r"%(?:\d+\$)?[#0+'-]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"
    r"[diouxXeEfFgGaAcspn@]|%%",
    # numbered tags as react-i18next's <Trans> writes them: <0>, </0>, <1/>
    "numbered_tag": r"</?\d+\s*/?>",
    # URLs (scheme or www.), trailing sentence punctuation left out
    "url": r"(?:[a-zA-Z][a-zA-Z0-9+.-]*://|www\.)[^\s<>\"'`]*[^\s<>\"'`.,;:!?)\]}]",
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    # Markdown-style code spans in plain text: `x`, ``x ` y``
    "code_span": r"(`+)(?:(?!\1).)+?\1",
}


@dataclass(frozen=True, slots=True)
class Match:
    """One protected span of a text: ``text[start:end]``, found by pattern ``name``."""

    start: int
    end: int
    name: str


class PlaceholderFinder:
    """Finds protected spans with the built-in patterns plus ``extra`` ones."""

    def __init__(self, extra: Sequence[str] = (), *, builtin: Iterable[str] | None = None) -> None:
        names = list(BUILTIN_PATTERNS) if builtin is None else list(builtin)
        self._patterns: list[tuple[str, re.Pattern[str]]] = [
            (name, re.compile(BUILTIN_PATTERNS[name])) for name in names
        ]
        for i, pattern in enumerate(extra):
            try:
                self._patterns.append((f"extra_{i}", re.compile(pattern)))
            except re.error as exc:
                raise ValueError(f"placeholder pattern {pattern!r}: {exc}") from exc

    def find_spans(self, text: str) -> list[Match]:
        """Non-overlapping protected spans of ``text`` in order (leftmost, then longest)."""
        candidates = [
            (m.start(), -(m.end() - m.start()), rank, name, m.end())
            for rank, (name, pattern) in enumerate(self._patterns)
            for m in pattern.finditer(text)
            if m.end() > m.start()
        ]
        chosen: list[Match] = []
        end = 0
        for start, _, _, name, stop in sorted(candidates):
            match = Match(start, stop, name)
            if match.start >= end:
                chosen.append(match)
                end = match.end
        return chosen
