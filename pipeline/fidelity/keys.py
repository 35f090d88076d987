"""The part of a cache key that says how a request's text is handled beyond the model."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.contract.messages import TranslationRequest

# Bumped when the fidelity layer changes what a given request translates to.
# Changing BABELSTREAM_FIDELITY__* settings needs a new BABELSTREAM_REDIS__CACHE_VERSION.
SCHEME = "fidelity-1"


def fidelity_variant(request: TranslationRequest, glossary_version: int | None = None) -> str:
    """Format, glossary name and version, and inline terms, as one canonical string."""
    terms = [[t.source, t.target] for t in request.terms or ()]
    return json.dumps(
        [
            SCHEME,
            request.format or "text",
            request.glossary,
            glossary_version,
            terms,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
