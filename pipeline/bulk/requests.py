"""Deterministic ids and the requests a bulk job publishes.

A segment's request id is ``<job>:<doc key>:<segment index>``: the same job,
document and segment always get the same id, so a rerun recognises what an
earlier run finished. The doc key is a short digest of the document id, so
ids stay within the contract's 128 characters whatever the document ids
look like.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.bulk import BulkInputError
from pipeline.contract.digest import request_digest
from pipeline.contract.messages import TranslationRequest
from pipeline.contract.pairs import Pair

JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_WIRE_ID = 128


def _short_digest(*parts: str) -> str:
    h = hashlib.blake2b(digest_size=8, person=b"bs-bulk-v1")
    for part in parts:
        encoded = part.encode()
        h.update(len(encoded).to_bytes(8, "big"))
        h.update(encoded)
    return h.hexdigest()


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` if usable as a folder name and id prefix, else raise BulkInputError."""
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise BulkInputError(
            f"invalid job id {job_id!r}: 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )
    return job_id


def default_job_id(
    inputs: Sequence[str],
    pair: Pair,
    *,
    id_column: str | None,
    text_column: str,
    tenant: str | None,
    domain: str | None,
    text_format: str = "text",
    glossary: str | None = None,
) -> str:
    """A job id from everything that defines the job, so the same command resumes."""
    fields: list[object] = [list(inputs), pair.id, id_column, text_column, tenant, domain]
    if text_format != "text" or glossary is not None:  # ids of plain jobs stay as they were
        fields += [text_format, glossary]
    spec = json.dumps(fields)
    return f"bulk-{pair.id}-{_short_digest(spec)}"


def job_identity(
    pair: Pair,
    tenant: str | None,
    domain: str | None,
    text_format: str = "text",
    glossary: str | None = None,
) -> dict[str, Any]:
    """The manifest fields a job keeps for life (they change translations)."""
    identity: dict[str, Any] = {"pair": pair.id, "tenant": tenant, "domain": domain}
    if text_format != "text" or glossary is not None:  # manifests of plain jobs stay as they were
        identity.update(text_format=text_format, glossary=glossary)
    return identity


def doc_key(doc_id: str) -> str:
    """16 hex characters standing for a document id in request ids."""
    return _short_digest(doc_id)


def wire_doc_id(doc_id: str) -> str:
    """The ``doc_id`` carried by requests: the id itself when it fits the contract."""
    return doc_id if 0 < len(doc_id) <= MAX_WIRE_ID else f"key:{doc_key(doc_id)}"


def request_id(job_id: str, doc_id: str, segment_index: int) -> str:
    """The request id of one segment (at most 64 + 1 + 16 + 1 + 20 characters)."""
    return f"{job_id}:{doc_key(doc_id)}:{segment_index}"


def text_digest(text: str) -> str:
    """Fingerprint of a segment's text, kept with its result so stale results are not reused."""
    return _short_digest(text)


@dataclass(frozen=True, slots=True)
class RequestTemplate:
    """Everything a job's requests share; makes the Kafka records of its segments."""

    job_id: str
    pair: Pair
    model_id: str
    timeout_ms: int
    tenant: str | None = None
    domain: str | None = None
    # the job's own results topic (see pipeline.kafka.reply_topics)
    reply_to: str | None = None
    text_format: str = "text"
    glossary: str | None = None

    def request(
        self, doc_id: str, segment_index: int, text: str, submitted_at: int
    ) -> TranslationRequest:
        """The request for one segment of one document."""
        return TranslationRequest(
            request_id=request_id(self.job_id, doc_id, segment_index),
            source_lang=self.pair.source,
            target_lang=self.pair.target,
            text=text,
            submitted_at=submitted_at,
            timeout_ms=self.timeout_ms,
            tenant=self.tenant,
            domain=self.domain,
            job_id=self.job_id,
            doc_id=wire_doc_id(doc_id),
            segment_index=segment_index,
            reply_to=self.reply_to,
            format=None if self.text_format == "text" else self.text_format,  # type: ignore[arg-type]
            glossary=self.glossary,
        )

    def record(self, request: TranslationRequest) -> tuple[bytes, bytes]:
        """(key, value) for ``translate.work-bulk.<model>``, keyed by digest like the router."""
        return request_digest(request, self.model_id).encode(), request.to_json()
