"""Router step: one raw ingress record in, exactly one outgoing record out.

Valid requests go to their pair's work topic (interactive or bulk) keyed by
content digest, so identical texts meet on one partition; invalid input goes
to the dead-letter topic; requests for a pair no model serves get an
``error`` result at once. Pure logic: the Faust agent only moves bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pipeline.codec import RecordRef, Rejected, decode_request
from pipeline.digest import content_digest
from pipeline.messages import (
    UNSUPPORTED_PAIR_REASON,
    Headers,
    TranslationRequest,
    TranslationResult,
)
from pipeline.pairs import DLQ_TOPIC, RESULTS_TOPIC, bulk_topic, pair_topic
from pipeline.settings import LimitSettings

RouteKind = Literal["routed", "dead_letter", "unsupported"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to produce."""

    kind: RouteKind
    topic: str
    key: bytes | None
    value: bytes
    headers: Headers


def request_digest(request: TranslationRequest, model_id: str) -> str:
    """The digest that keys pair topics, windowed dedup and the caches."""
    return content_digest(
        model_id=model_id,
        source_lang=request.source_lang,
        target_lang=request.target_lang,
        text=request.text,
        tenant=request.tenant,
        domain=request.domain,
    )


def result_topic(request: TranslationRequest) -> str:
    return request.reply_to or RESULTS_TOPIC


class Router:
    """Decides where each ingress record goes.

    ``served`` maps pair ids to the model id serving them (from the registry).
    """

    def __init__(
        self, served: Mapping[str, str], limits: LimitSettings, worker: str = "router"
    ) -> None:
        self._served = dict(served)
        self._limits = limits
        self._worker = worker

    def route(
        self, key: bytes | None, value: bytes | None, ref: RecordRef, headers: Headers
    ) -> Outgoing:
        decoded = decode_request(key, value, ref, self._limits)
        if isinstance(decoded, Rejected):
            return Outgoing("dead_letter", DLQ_TOPIC, key, decoded.dead_letter.to_json(), headers)
        request = decoded.request
        model_id = self._served.get(request.pair.id)
        if model_id is None:
            served = ", ".join(sorted(self._served)) or "none"
            result = TranslationResult.for_request(
                request,
                status="error",
                error=f"no model serves pair {request.pair.id} (served: {served})",
                # the SLA job counts these in one "unsupported" series, not one per typo
                reason=UNSUPPORTED_PAIR_REASON,
                worker=self._worker,
            )
            return Outgoing(
                "unsupported", result_topic(request), request.request_id.encode(),
                result.to_json(), headers,
            )
        if request.timeout_ms is None:
            request = request.model_copy(update={"timeout_ms": self._limits.default_timeout_ms})
        topic = bulk_topic(request.pair) if request.is_bulk else pair_topic(request.pair)
        digest = request_digest(request, model_id)
        return Outgoing("routed", topic, digest.encode(), request.to_json(), headers)
