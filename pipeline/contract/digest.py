"""Content digests for partitioning, de-duplication and cache keys.

The digest covers every input that can change a translation: model, both
languages, tenant, domain, the fidelity variant (format, glossary and its
version, inline terms, protection settings) and the *full* NFC-normalized
text. Fields are
length-prefixed so no two different field tuples serialize alike; two texts
that share a prefix never share a digest, and tenants never see each other's
entries.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.contract.messages import TranslationRequest

DIGEST_BYTES = 16  # BLAKE2b-128


def normalize_text(text: str) -> str:
    """NFC only: whitespace is meaningful for faithful document reassembly."""
    return unicodedata.normalize("NFC", text)


def content_digest(
    *,
    model_id: str,
    source_lang: str,
    target_lang: str,
    text: str,
    tenant: str | None = None,
    domain: str | None = None,
    variant: str = "",
) -> str:
    """Hex BLAKE2b-128 digest of everything that determines a translation.

    ``variant`` names how the text is handled beyond the model (see
    :func:`fidelity_variant`).
    """
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=b"babelstream-v1")
    for field in (model_id, source_lang, target_lang, tenant or "", domain or "", variant):
        encoded = field.encode()
        h.update(len(encoded).to_bytes(4, "big"))
        h.update(encoded)
    h.update(normalize_text(text).encode())
    return h.hexdigest()


def files_fingerprint(paths: Iterable[Path], chunk_bytes: int = 1 << 20) -> str:
    """Short BLAKE2b digest of files' contents (model weights, tokenizers).

    Part of the model id used in cache keys, so rebuilding or replacing a model
    under the same name never serves translations of the old one from cache.
    """
    h = hashlib.blake2b(digest_size=6)
    for path in paths:
        with Path(path).open("rb") as f:
            while chunk := f.read(chunk_bytes):
                h.update(chunk)
    return h.hexdigest()


# Bumped when the fidelity layer changes what a given request translates to.
# Changing BABELSTREAM_FIDELITY__* settings needs a new BABELSTREAM_REDIS__CACHE_VERSION.
FIDELITY_SCHEME = "fidelity-1"


def fidelity_variant(request: TranslationRequest, glossary_version: int | None = None) -> str:
    """Format, glossary name and version, and inline terms, as one canonical string."""
    terms = [[t.source, t.target] for t in request.terms or ()]
    return json.dumps(
        [
            FIDELITY_SCHEME,
            request.format or "text",
            request.glossary,
            glossary_version,
            terms,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def request_digest(
    request: TranslationRequest, model_id: str, glossary_version: int | None = None
) -> str:
    """The digest that keys pair topics, windowed dedup and the caches.

    ``glossary_version`` is the version of the request's named glossary the
    worker will apply, so a changed glossary never serves a stale entry; the
    router, which does not read glossaries, keys by name only (identical
    requests still meet on one partition).
    """
    return content_digest(
        model_id=model_id,
        source_lang=request.source_lang,
        target_lang=request.target_lang,
        text=request.text,
        tenant=request.tenant,
        domain=request.domain,
        variant=fidelity_variant(request, glossary_version),
    )
