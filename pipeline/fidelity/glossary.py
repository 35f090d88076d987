"""Glossary terms and do-not-translate terms, matched in source text.

Matching rules:

* Unicode-normalised: terms and text are compared in NFC.
* Case-aware: a term written all in lower case matches any capitalisation
  (``train station`` matches ``Train station``, and a target term then gets
  the same initial capital); a term with an upper-case letter (``Kafka``,
  ``API``) matches only as written.
* Whole word: a term never matches inside a longer word (``Kafka`` is not
  found in ``Kafkaesque``).
* Longest match first: ``train station`` wins over ``train``.

A term with no target is *do not translate*: the matched text is kept as it
is. Terms are enforced by masking: the engine sees a placeholder and the
target (or the original) is put back in its place.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.fidelity.document import TermHit


@dataclass(frozen=True, slots=True)
class Term:
    """A source term and its fixed target; ``target=None`` means do not translate."""

    source: str
    target: str | None = None


@dataclass(frozen=True, slots=True)
class TermMatch:
    """A term found at ``text[start:end]``; ``replacement`` is what the output gets."""

    start: int
    end: int
    replacement: str
    hit: TermHit


def _edge(term: str, pattern: str) -> str:
    """Word-boundary guards only where the term's edge is a word character."""
    head = r"(?<!\w)" if re.match(r"\w", term) else ""
    tail = r"(?!\w)" if re.search(r"\w$", term) else ""
    return head + pattern + tail


class Glossary:
    """A compiled set of terms; ``version`` names the stored glossary version it came from."""

    def __init__(self, terms: Iterable[Term], *, name: str | None = None, version: int = 0) -> None:
        self.name = name
        self.version = version
        by_source: dict[str, Term] = {}
        for term in terms:
            source = unicodedata.normalize("NFC", term.source.strip())
            if not source:
                raise ValueError("a glossary term must not be empty")
            target = None if term.target is None else unicodedata.normalize("NFC", term.target)
            by_source[source] = Term(source, target or None)
        self.terms: tuple[Term, ...] = tuple(by_source.values())
        self._by_key: dict[str, Term] = {}
        alternatives: list[str] = []
        for term in sorted(self.terms, key=lambda t: (-len(t.source), t.source)):
            folded = term.source == term.source.lower()
            key = term.source.lower() if folded else term.source
            if key in self._by_key:
                continue
            self._by_key[key] = term
            body = re.escape(term.source)
            alternatives.append(_edge(term.source, f"(?i:{body})" if folded else body))
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

    def __bool__(self) -> bool:
        return bool(self.terms)

    def find(self, text: str) -> list[TermMatch]:
        """Every term occurrence in ``text`` (which should be NFC), left to right."""
        if self._pattern is None:
            return []
        found = []
        for m in self._pattern.finditer(text):
            surface = m.group(0)
            term = self._by_key.get(surface) or self._by_key[surface.lower()]
            found.append(
                TermMatch(
                    m.start(),
                    m.end(),
                    _replacement(term, surface),
                    TermHit(term.source, term.target),
                )
            )
        return found


def _replacement(term: Term, surface: str) -> str:
    if term.target is None:
        return surface
    if surface[:1].isupper() and term.source[:1].islower() and term.target[:1].islower():
        return term.target[:1].upper() + term.target[1:]
    return term.target
