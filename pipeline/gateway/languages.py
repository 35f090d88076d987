"""The languages a registry serves, as LibreTranslate's API names them.

LibreTranslate lower-cases the codes it is given and maps three aliases
(``pb`` -> ``pt-BR``, ``zh`` -> ``zh-Hans``, ``zt`` -> ``zh-Hant``); a code
that names a regional variant the registry lacks falls back to the bare
language and back (``pt-BR`` <-> ``pt``, ``zh-Hans`` <-> ``zh``). Codes are
answered as the registry spells them (BCP-47: ``en-XA``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline.detect import language_name, primary_subtag
from pipeline.engine.registry import Registry

# LibreTranslate's aliases (libretranslate/language.py), lower case
ALIASES: dict[str, str] = {"pb": "pt-br", "zh": "zh-hans", "zt": "zh-hant"}
# CLDR's names of the pseudo-locale regions
# a language with an optional script and region (pt-BR, zh-Hant-TW, es-419), lower case
_REGIONAL = re.compile(r"[a-z]{2,3}(-[a-z]{4})?(-([a-z]{2}|[0-9]{3}))?")
_PSEUDO_REGIONS = {"xa": "pseudo-accents", "xb": "pseudo-bidi"}


def display_name(tag: str) -> str:
    """``en`` -> English, ``en-XA`` -> English (pseudo-accents), ``pt-BR`` -> Portuguese (BR)."""
    base = language_name(tag) or tag
    rest = tag.split("-")[1:]
    if not rest:
        return base
    labels = [_PSEUDO_REGIONS.get(part.lower(), part) for part in rest]
    return f"{base} ({', '.join(labels)})"


@dataclass(frozen=True)
class Languages:
    """Which language pairs are served, and how LibreTranslate codes resolve to them."""

    pairs: frozenset[tuple[str, str]]
    _by_lower: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Languages:
        served = frozenset(pairs)
        tags = {tag for pair in served for tag in pair}
        return cls(served, {tag.lower(): tag for tag in tags})

    @classmethod
    def from_registry(cls, registry: Registry) -> Languages:
        return cls.of((e.pair.source, e.pair.target) for e in registry.pairs.values())

    @property
    def tags(self) -> tuple[str, ...]:
        """Every language of every pair, sorted."""
        return tuple(sorted(self._by_lower.values()))

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(sorted({s for s, _ in self.pairs}))

    def resolve(self, code: str) -> str | None:
        """The registry's tag for a code a client sent, or None when none serves it."""
        lower = ALIASES.get(code.strip().lower(), code.strip().lower())
        found = self._by_lower.get(lower)
        if found is not None:
            return found
        bare = primary_subtag(lower)
        # pt-BR asked, only pt served; a tag with more than a script and a region
        # (en-XA-x-foo, a variant, a private use) is a typo, not a dialect of en
        if bare != lower and bare in self._by_lower and _REGIONAL.fullmatch(lower):
            return self._by_lower[bare]
        variants = sorted(t for low, t in self._by_lower.items() if primary_subtag(low) == lower)
        return variants[0] if len(variants) == 1 else None  # pt asked, only pt-BR served

    def targets(self, source: str) -> list[str]:
        return sorted(t for s, t in self.pairs if s == source)

    def sources_for(self, target: str) -> list[str]:
        return sorted(s for s, t in self.pairs if t == target)

    def serves(self, source: str, target: str) -> bool:
        return (source, target) in self.pairs

    def listing(self) -> list[dict[str, Any]]:
        """``GET /languages``: every language with the targets it translates into."""
        return [
            {"code": tag, "name": display_name(tag), "targets": self.targets(tag)}
            for tag in self.tags
        ]
