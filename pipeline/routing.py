"""Router step: one raw ingress record in, the records to produce out.

Valid requests go to the work topic (interactive or bulk) of the model that
serves their pair, keyed by content digest, so identical texts meet on one
partition and every pair of a model meets in its micro-batches; invalid input goes
to the dead-letter topic, and when it carries a usable ``request_id`` its
sender also gets an ``error`` result naming the reason, so nobody waits for
a result that will never come; requests for a pair no model serves get an
``error`` result at once. Pure logic: the Faust agent only moves bytes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from pipeline.contract.codec import DeadLettered, RecordRef, decode_request
from pipeline.contract.digest import request_digest
from pipeline.contract.messages import (
    AUTO_LANGUAGE,
    DeadLetter,
    Headers,
    SourceDetection,
    TranslationRequest,
    TranslationResult,
    now_ms,
)
from pipeline.contract.pairs import DLQ_TOPIC, Pair, bulk_work_topic, work_topic
from pipeline.detect import Detection
from pipeline.kafka.records import Outgoing
from pipeline.settings import LimitSettings

# Outgoing kinds: routed (to a work topic), dead_letter (to the DLQ), rejected (the error
# result that tells a dead letter's sender), unsupported (the error result for a pair no
# model serves)
# BCP-47 "undetermined": the language of a rejected request whose tag is unusable
UNDETERMINED = "und"


class Router:
    """Decides where each ingress record goes.

    ``model_of`` gives the id of the model serving a pair (from the registry),
    or None; ``hint`` says how to serve a pair no model serves (for the error
    result its sender gets).
    """

    def __init__(
        self,
        model_of: Callable[[Pair], str | None],
        limits: LimitSettings,
        worker: str = "router",
        hint: str = "",
        detect: Callable[[str, str], Detection] | None = None,
    ) -> None:
        """``detect``: the source language of a text towards a target, for requests sent
        with ``source_lang: auto`` (None: such requests are answered as unsupported)."""
        self._model_of = model_of
        self._limits = limits
        self._worker = worker
        self._hint = hint
        self._detect = detect

    def route(
        self, key: bytes | None, value: bytes | None, ref: RecordRef, headers: Headers
    ) -> list[Outgoing]:
        """The records to produce for one ingress record, in order: exactly one, or a dead
        letter followed by the ``rejected`` error result for its sender."""
        decoded = decode_request(key, value, ref, self._limits)
        if isinstance(decoded, DeadLettered):
            letter = decoded.dead_letter
            out = [Outgoing(DLQ_TOPIC, key, letter.to_json(), headers, "dead_letter")]
            reply = rejection_result(value, letter, self._worker)
            if reply is not None:
                reply_to, result = reply
                out.append(Outgoing.for_result(result, headers, "rejected", reply_to))
            return out
        return [self._accepted(decoded.request, headers)]

    def _accepted(self, request: TranslationRequest, headers: Headers) -> Outgoing:
        if request.source_lang == AUTO_LANGUAGE and self._detect is not None:
            found = self._detect(request.text, request.target_lang)
            if found.language is None:
                result = TranslationResult.for_request(
                    request,
                    status="error",
                    error=f"could not tell the language of the text among those translated "
                    f"into {request.target_lang}; send its source_lang",
                    reason="language_not_detected",
                    worker=self._worker,
                )
                return Outgoing.for_result(result, headers, "unsupported", request.reply_to)
            if not found.supported:
                result = TranslationResult.for_request(
                    request,
                    status="error",
                    error=f"the text is detected as {found.language} (confidence "
                    f"{found.confidence:.2f}), which no model translates into "
                    f"{request.target_lang}; send its source_lang if it is another language",
                    reason="unsupported_source",
                    worker=self._worker,
                )
                return Outgoing.for_result(result, headers, "unsupported", request.reply_to)
            detected = SourceDetection(language=found.language, confidence=found.confidence)
            request = request.model_copy(
                update={"source_lang": found.language, "detected": detected}
            )
        model_id = self._model_of(request.pair)
        if model_id is None:
            result = TranslationResult.for_request(
                request,
                status="error",
                error=f"no model serves pair {request.pair.id}{self._hint}",
                reason="unsupported_pair",
                worker=self._worker,
            )
            return Outgoing.for_result(result, headers, "unsupported", request.reply_to)
        if request.timeout_ms is None:
            request = request.model_copy(update={"timeout_ms": self._limits.default_timeout_ms})
        topic = bulk_work_topic(model_id) if request.is_bulk else work_topic(model_id)
        digest = request_digest(request, model_id)
        return Outgoing(topic, digest.encode(), request.to_json(), headers, "routed")


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    # the messages' regexes need Python's engine (look-ahead), as in pipeline.contract.messages
    return TypeAdapter(
        model.model_fields[name].rebuild_annotation(), config=ConfigDict(regex_engine="python-re")
    )


def _field(document: dict[str, Any], model: type[BaseModel], name: str) -> Any:
    """``document[name]`` when it is valid for ``model``'s field of that name, else None."""
    value = document.get(name)
    if value is None:
        return None
    try:
        return _field_adapter(model, name).validate_python(value, strict=True)
    except ValidationError:
        return None


def rejection_result(
    value: bytes | None, letter: DeadLetter, worker: str
) -> tuple[str | None, TranslationResult] | None:
    """(its reply topic, ``error`` result) telling the sender of a dead-lettered request
    why, or None when the record has no usable ``request_id`` (not JSON, not an object,
    or no valid id).

    Fields that are themselves invalid are left out or replaced: a language tag
    by ``und``, ``submitted_at`` by now; ``reply_to`` is honoured when valid.
    """
    try:
        document = json.loads(value or b"")
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None

    def valid(name: str, model: type[BaseModel] = TranslationResult) -> Any:
        return _field(document, model, name)

    request_id = valid("request_id")
    if request_id is None:
        return None
    source = valid("source_lang") or UNDETERMINED
    target = valid("target_lang") or UNDETERMINED
    done = now_ms()
    submitted = valid("submitted_at")
    submitted = submitted if submitted is not None and submitted <= done else done
    result = TranslationResult(
        request_id=request_id,
        source_lang=source,
        target_lang=target,
        pair=f"{source}_{target}",
        status="error",
        error=letter.error,
        reason=letter.reason,
        submitted_at=submitted,
        completed_at=done,
        latency_ms=done - submitted,
        worker=worker,
        **{name: valid(name) for name in ("tenant", "job_id", "doc_id", "segment_index")},
    )
    return valid("reply_to", TranslationRequest), result
