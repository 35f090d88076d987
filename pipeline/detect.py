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

Restricted to the served languages alone, a detector calls every text one
of them: Russian or Chinese come out as English with confidence 1. So the
served languages are weighed against a rival. A wide detector, lingua's
low-accuracy mode (its trigram models: about 40 MB for 28 languages, where
high accuracy takes about 540 MB) over the served languages and the
*reference languages* (``detection.reference_languages``), names the most
likely language outside the candidates. Then a high-accuracy detector of the
candidates and that rival decides (only the languages seen as rivals load
their larger models): a text at ``detection.unsupported_confidence`` or more
in the rival is reported in it with ``supported`` False, so a caller refuses
it as an unsupported source instead of translating it as something it is
not; otherwise the best candidate is the answer, with its confidence against
the rival. Low accuracy alone misreads short texts ("Hello world, 42
times!" as Vietnamese); it only picks the rival.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from lingua import IsoCode639_1, IsoCode639_3, Language, LanguageDetectorBuilder
from lingua import LanguageDetector as _LinguaDetector

from pipeline.settings import DetectionSettings

# share of a text's letters that must belong to a pseudo-locale's alphabet
PSEUDO_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class Detection:
    """The language of one text (a tag, or None) and the full detector's 0-1 confidence."""

    language: str | None
    confidence: float
    # False: the text is in ``language``, which none of the candidates is (not translatable)
    supported: bool = True


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
    ``reference`` are languages weighed beside them by the wide detector (see
    the module's docstring); a text most likely in one of those, at
    ``unsupported_confidence`` or more, is detected as unsupported.
    """

    def __init__(
        self,
        languages: Iterable[str],
        alphabets: Mapping[str, frozenset[str]] | None = None,
        reference: Iterable[str] = (),
        unsupported_confidence: float = 0.5,
    ) -> None:
        self.languages: tuple[str, ...] = tuple(sorted(set(languages)))
        known = pseudo_alphabets() if alphabets is None else alphabets
        self._alphabets = {tag: known[tag] for tag in self.languages if tag in known}
        natural = sorted(
            (t for t in self.languages if t not in self._alphabets),
            key=lambda t: (t != primary_subtag(t), t),  # the bare tag first
        )
        self._tag_of = _tags_by_language(natural)
        # the wide detector's languages: the served ones under their served tags first
        self._wide_tag_of = self._tag_of | {
            lang: tag
            for lang, tag in _tags_by_language(sorted(reference)).items()
            if lang not in self._tag_of
        }
        self._unsupported_at = unsupported_confidence
        self._wide: _LinguaDetector | None = None
        if len(self._wide_tag_of) > len(self._tag_of):
            self._wide = (
                LanguageDetectorBuilder.from_languages(*self._wide_tag_of)
                .with_low_accuracy_mode()
                .build()
            )

    @property
    def detectable(self) -> tuple[str, ...]:
        """The tags this detector can answer (natural languages lingua knows, pseudo-locales)."""
        return tuple(sorted({*self._tag_of.values(), *self._alphabets}))

    def ranked(self, text: str, among: Iterable[str] | None = None) -> list[Detection]:
        """The candidates with their confidences, best first; empty when nothing matches.

        ``among`` narrows the candidates to those tags (others of the set are
        ignored). When the text is most likely in a language no candidate is, that
        language comes first, ``supported`` False.
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
        rival = self._rival(text, natural)
        weighed = natural | ({rival: self._wide_tag_of[rival]} if rival is not None else {})
        if len(weighed) == 1:
            # one candidate: nothing to weigh it against; a text with letters is in it
            return [Detection(next(iter(weighed.values())), 1.0)]
        ranked: list[Detection] = []
        for c in _high_accuracy(frozenset(weighed)).compute_language_confidence_values(text):
            if c.language == rival:
                if c.value >= self._unsupported_at:
                    ranked.insert(0, Detection(weighed[rival], round(c.value, 4), False))
            elif c.value > 0:
                ranked.append(Detection(weighed[c.language], round(c.value, 4)))
        return ranked

    def _rival(self, text: str, natural: Mapping[Language, str]) -> Language | None:
        """The language outside the candidates the text is most likely in, by the wide
        (low-accuracy) detector; None without reference languages."""
        if self._wide is None:
            return None
        for c in self._wide.compute_language_confidence_values(text):
            if c.language not in natural:
                return c.language
        return None

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


@functools.lru_cache(maxsize=256)
def _high_accuracy(languages: frozenset[Language]) -> _LinguaDetector:
    """lingua's high-accuracy detector of these languages (its models load once per
    language and are shared by every detector)."""
    return LanguageDetectorBuilder.from_languages(*languages).build()


def _tags_by_language(tags: Iterable[str]) -> dict[Language, str]:
    """lingua's language of each tag it knows (the first tag of a language wins)."""
    found: dict[Language, str] = {}
    for tag in tags:
        language = _lingua_language(primary_subtag(tag))
        if language is not None and language not in found:
            found[language] = tag
    return found


class SourceDetector:
    """The source language of a request sent with ``source_lang: auto``.

    Detected among the languages some model translates into the request's
    target (``sources_for``), out of ``languages`` (every one the deployment
    serves), beside ``settings.reference_languages``. lingua's models load on
    the first call, so a router that never sees ``auto`` pays nothing for them.
    """

    def __init__(
        self,
        languages: Iterable[str],
        sources_for: Callable[[str], Iterable[str]],
        settings: DetectionSettings,
    ) -> None:
        self._languages = tuple(languages)
        self._sources_for = sources_for
        self._settings = settings
        self._detector: LanguageDetector | None = None

    def __call__(self, text: str, target: str) -> Detection:
        if self._detector is None:
            self._detector = detector_for(self._languages, self._settings)
        return self._detector.detect(text, among=self._sources_for(target))


def detector_for(languages: Iterable[str], settings: DetectionSettings) -> LanguageDetector:
    """A detector of ``languages`` with the deployment's reference languages and threshold."""
    return LanguageDetector(
        languages,
        reference=settings.reference_languages,
        unsupported_confidence=settings.unsupported_confidence,
    )


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
