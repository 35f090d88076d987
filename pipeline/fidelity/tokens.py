"""The placeholder token a protected span becomes while a segment is translated.

``⟦n⟧`` (U+27E6, decimal index, U+27E7): no letters, so no model or
pseudo-locale has a reason to change it, and the bundled demo model's
vocabulary holds both brackets as single pieces and was trained to copy
tokens through in place. Other models may drop or move them; the fidelity
layer then puts them back by attention alignment.
"""

from __future__ import annotations

import re

OPEN = "\u27e6"
CLOSE = "\u27e7"
TOKEN_RE = re.compile(f"{OPEN}([0-9]+){CLOSE}")


def token(index: int) -> str:
    """The placeholder token for span number ``index``."""
    return f"{OPEN}{index}{CLOSE}"
