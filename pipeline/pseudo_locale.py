"""The en-XA pseudo-locale character map.

It makes the demo model's training targets and evaluation references, and
gives language detection en-XA's letters. Translations never come from it:
they come from the model.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

MAP_FILE = Path(__file__).with_name("pseudo_locale_en-XA.json")


@cache
def char_map() -> dict[str, str]:
    """ASCII letter -> accented look-alike, as shipped in ``pseudo_locale_en-XA.json``."""
    return dict(json.loads(MAP_FILE.read_text(encoding="utf-8"))["map"])


def to_pseudo(text: str) -> str:
    """English -> en-XA: map ASCII letters, keep every other character."""
    table = str.maketrans(char_map())
    return text.translate(table)


def from_pseudo(text: str) -> str:
    """en-XA -> English: the exact inverse of :func:`to_pseudo`."""
    table = str.maketrans({v: k for k, v in char_map().items()})
    return text.translate(table)
