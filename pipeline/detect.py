"""Language detection restricted to a given set of BCP-47 languages.

One :class:`LanguageDetector` knows a fixed set of language tags (those a
model registry serves). It answers, for each text on its own, which of
those languages the text is in and how sure it is; a caller may narrow the
candidates per call (``among``: the sources that can reach a target).

Natural languages are detected by lingua (``lingua-language-detector``),
whose n-gram models ship inside its wheel: nothing is downloaded at run
time. A tag is matched to lingua's languages by its primary subtag (ISO
639-1 or 639-3); when several tags share one (``pt`` and ``pt-BR``), the
bare tag wins, else the first in sorted order.

Pseudo-locales are no language any detector knows. One that has an
alphabet of its own (``en-XA``, accented English: every ASCII letter
mapped to one look-alike) is detected by that alphabet: a text of which at
least :data:`PSEUDO_SHARE` of the letters belong to it is in that locale,
with that share as confidence. A real language's accents never come near
that share (French has a few accented letters per word, en-XA all of
them), so the two cannot be confused. A pseudo-locale without an alphabet
(``en-XB``) is never detected. A text with no letters (digits, emoji, a
URL), or one no candidate matches, has no language: ``language`` None,
confidence 0.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lingua import IsoCode639_1, IsoCode639_3, Language, LanguageDetectorBuilder
from lingua import LanguageDetector as _LinguaDetector

# share of a text's letters that must belong to a pseudo-locale's alphabet
PSEUDO_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class Detection:
    """The language of one text (a tag of the detector's set, or None) and a 0-1 confidence."""

    language: str | None
    confidence: float


UNKNOWN = Detection(None, 0.0)


@functools.cache
def pseudo_alphabets() -> dict[str, frozenset[str]]:
    """The pseudo-locales this project knows by their letters: en-XA (the demo model's)."""
    from pipeline.pseudo_locale import char_map

    letters = char_map().values()
    return {"en-XA": frozenset(letters) | frozenset(c.upper() for c in letters)}


def primary_subtag(tag: str) -> str:
    """``pt-BR`` -> ``pt`` (lower case)."""
    return tag.split("-", 1)[0].lower()


def _lingua_language(subtag: str) -> Language | None:
    """lingua's language for an ISO 639-1 or 639-3 code, or None when it knows none."""
    try:
        if len(subtag) == 2:
            return Language.from_iso_code_639_1(IsoCode639_1.from_str(subtag))
        if len(subtag) == 3:
            return Language.from_iso_code_639_3(IsoCode639_3.from_str(subtag))
    except ValueError:
        return None
    return None


def language_name(tag: str) -> str | None:
    """English name of a tag's primary language as lingua spells it (``pt-BR`` -> Portuguese)."""
    language = _lingua_language(primary_subtag(tag))
    return language.name.replace("_", " ").title() if language is not None else None


class LanguageDetector:
    """Detects which of ``languages`` (BCP-47 tags) each text is in.

    ``alphabets`` maps pseudo-locale tags to their letters (default:
    :func:`pseudo_alphabets`); only those of ``languages`` are used. A tag
    that is neither lingua's nor has an alphabet is never detected.
    """

    def __init__(
        self,
        languages: Iterable[str],
        alphabets: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.languages: tuple[str, ...] = tuple(sorted(set(languages)))
        known = pseudo_alphabets() if alphabets is None else alphabets
        self._alphabets = {tag: known[tag] for tag in self.languages if tag in known}
        self._tag_of: dict[Language, str] = {}
        natural = sorted(
            (t for t in self.languages if t not in self._alphabets),
            key=lambda t: (t != primary_subtag(t), t),  # the bare tag first
        )
        for tag in natural:
            language = _lingua_language(primary_subtag(tag))
            if language is not None and language not in self._tag_of:
                self._tag_of[language] = tag
        self._lingua: _LinguaDetector | None = None
        if len(self._tag_of) >= 2:
            self._lingua = LanguageDetectorBuilder.from_languages(*self._tag_of).build()

    @property
    def detectable(self) -> tuple[str, ...]:
        """The tags this detector can answer (natural languages lingua knows, pseudo-locales)."""
        return tuple(sorted({*self._tag_of.values(), *self._alphabets}))

    def ranked(self, text: str, among: Iterable[str] | None = None) -> list[Detection]:
        """Every candidate with its confidence, best first; empty when nothing matches.

        ``among`` narrows the candidates to those tags (others of the set are
        ignored, confidences renormalised over the rest).
        """
        allowed = set(self.languages if among is None else among) & set(self.languages)
        letters = [c for c in text if c.isalpha()]
        if not letters or not allowed:
            return []
        for tag, alphabet in self._alphabets.items():
            if tag in allowed:
                share = sum(c in alphabet for c in letters) / len(letters)
                if share >= PSEUDO_SHARE:
                    return [Detection(tag, round(share, 4))]
        natural = {lang: tag for lang, tag in self._tag_of.items() if tag in allowed}
        if not natural:
            return []
        if len(natural) == 1 or self._lingua is None:
            # one candidate: nothing to weigh it against; a text with letters is in it
            return [Detection(next(iter(natural.values())), 1.0)]
        values = [
            (natural[c.language], c.value)
            for c in self._lingua.compute_language_confidence_values(text)
            if c.language in natural
        ]
        total = sum(v for _, v in values)
        if total <= 0:
            return []
        return [Detection(tag, round(v / total, 4)) for tag, v in values if v > 0]

    def detect(self, text: str, among: Iterable[str] | None = None) -> Detection:
        """The most likely language of ``text`` (:data:`UNKNOWN` when none matches)."""
        ranked = self.ranked(text, among)
        return ranked[0] if ranked else UNKNOWN

    def detect_each(
        self, texts: Sequence[str], among: Iterable[str] | None = None
    ) -> list[Detection]:
        """One detection per text, each text on its own (a list is not one language)."""
        candidates = None if among is None else set(among)
        return [self.detect(text, candidates) for text in texts]


class SourceDetector:
    """The source language of a request sent with ``source_lang: auto``.

    Detected among the languages some model translates into the request's
    target (``sources_for``), out of ``languages`` (every one the deployment
    serves). lingua's models load on the first call, so a router that never
    sees ``auto`` pays nothing for them.
    """

    def __init__(
        self, languages: Iterable[str], sources_for: Callable[[str], Iterable[str]]
    ) -> None:
        self._languages = tuple(languages)
        self._sources_for = sources_for
        self._detector: LanguageDetector | None = None

    def __call__(self, text: str, target: str) -> Detection:
        if self._detector is None:
            self._detector = LanguageDetector(self._languages)
        return self._detector.detect(text, among=self._sources_for(target))


def accuracy(
    detector: LanguageDetector, samples: Sequence[tuple[str, str]]
) -> tuple[float, dict[str, float]]:
    """Share of ``(language, text)`` samples detected right, overall and per language."""
    hits: dict[str, list[bool]] = {}
    for language, text in samples:
        hits.setdefault(language, []).append(detector.detect(text).language == language)
    per = {lang: round(sum(h) / len(h), 4) for lang, h in sorted(hits.items())}
    total = sum(sum(h) for h in hits.values()) / max(1, len(samples))
    return round(total, 4), per
