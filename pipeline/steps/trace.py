"""Tracing steps: open the batch's spans after decode, close them once results are out.

Each micro-batch gets a ``batch`` span in a trace of its own, linked to every
request it carries; each request gets a ``translate`` span continuing the
request's own trace (from its Kafka headers). Results are produced with the
``translate`` span's context, so a trace runs from submit to result.
"""

from __future__ import annotations

from typing import Any, ClassVar

from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from pipeline.observability.tracing import (
    SPAN_BATCH,
    SPAN_TRANSLATE,
    extract_context,
    links_for,
    span_context_of,
    tracer,
)
from pipeline.steps.base import Batch, Fields, Item


class OpenSpans:
    """Starts the ``batch`` span and one ``translate`` span per decoded request.

    Reads: record headers. Sets: ``batch.span``, ``item.span``. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"record"})
    sets: ClassVar[Fields] = frozenset({"span"})

    in_canary: ClassVar[bool] = False  # a canary leaves no trace

    def __init__(self, compute_type: str) -> None:
        self._compute_type = compute_type

    async def __call__(self, batch: Batch) -> None:
        items = [item for item in batch.items if item.request is not None]
        topic = batch.items[0].record.topic if batch.items else ""
        batch.span = tracer().start_span(
            SPAN_BATCH,
            context=Context(),
            kind=SpanKind.CONSUMER,
            links=links_for(span_context_of(item.record.headers) for item in items),
            attributes={
                "messaging.system": "kafka",
                "messaging.source.name": topic,
                "messaging.batch.message_count": len(batch.items),
                "babelstream.model": batch.model_id,
                "babelstream.compute_type": self._compute_type,
                "babelstream.batch_size": len(items),
            },
        )
        link = [Link(batch.span.get_span_context())]
        for item in items:
            item.span = tracer().start_span(
                SPAN_TRANSLATE,
                context=extract_context(item.record.headers),
                kind=SpanKind.CONSUMER,
                links=link,
                attributes={"babelstream.request_id": item.request.request_id}
                if item.request
                else {},
            )


class CloseSpans:
    """Ends every span of the batch with what happened (status, cache, tokens).

    Reads: results and stats. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"result", "span"})
    sets: ClassVar[Fields] = frozenset()

    in_canary: ClassVar[bool] = False  # a canary leaves no trace

    def __init__(self, compute_type: str) -> None:
        self._compute_type = compute_type

    async def __call__(self, batch: Batch) -> None:
        for item in batch.items:
            if item.span is not None:
                item.span.set_attributes(_attributes(batch, item, self._compute_type))
                if item.result is not None and item.result.status == "error":
                    item.span.set_status(Status(StatusCode.ERROR, item.result.error or "error"))
                item.span.end()
        if batch.span is not None:
            stats = batch.stats
            batch.span.set_attribute("babelstream.engine_texts", stats.engine_texts)
            batch.span.set_attribute("babelstream.attempts", stats.attempts)
            for status, count in stats.by_status.items():
                batch.span.set_attribute(f"babelstream.{status}", count)
            batch.span.end()


def abandon_spans(batch: Batch, reason: str) -> None:
    """End the spans of a batch attempt that failed transiently (it will be retried)."""
    for span in [batch.span, *(item.span for item in batch.items)]:
        if span is not None and span.is_recording():
            span.set_status(Status(StatusCode.ERROR, reason))
            span.end()


def _attributes(batch: Batch, item: Item, compute_type: str) -> dict[str, Any]:
    result = item.result
    attributes: dict[str, Any] = {
        "babelstream.pair": item.request.pair.id if item.request else "",
        "babelstream.model": (result.model if result else None) or batch.model_id,
        "babelstream.compute_type": compute_type,
        "babelstream.batch_size": len(batch.items),
    }
    if result is not None:
        attributes |= {
            "babelstream.engine_batch_size": result.batch_size,
            "babelstream.input_tokens": result.input_tokens,
            "babelstream.output_tokens": result.output_tokens,
            "babelstream.cache": result.cache or "none",
            "babelstream.status": result.status,
            "babelstream.latency_ms": result.latency_ms,
        }
    return {k: v for k, v in attributes.items() if v is not None}
