"""route: each ingress record to its pair's work topic, the DLQ, or an error result."""

from __future__ import annotations

from opentelemetry import trace

from pipeline.codec import RecordRef
from pipeline.routing import Router
from pipeline.steps.base import Batch, Outgoing
from pipeline.tracing import SPAN_ROUTE, inject_headers, start_consumer_span


class Route:
    """Decides where every ingress record goes (exactly one outgoing record each).

    Reads: records. Sets: ``batch.outgoing`` (routed request keyed by content
    digest, dead letter, or ``error`` result for a pair no model serves), each
    with a ``route`` span's trace context. Raises: nothing: bad input is a
    dead letter.
    """

    def __init__(self, router: Router) -> None:
        self._router = router

    async def __call__(self, batch: Batch) -> None:
        for item in batch.items:
            record = item.record
            span = start_consumer_span(SPAN_ROUTE, record.headers, {
                "messaging.system": "kafka",
                "messaging.source.name": record.topic,
                "messaging.kafka.source.partition": record.partition,
                "messaging.kafka.message.offset": record.offset,
            })
            with trace.use_span(span, end_on_exit=True):
                out = self._router.route(
                    record.key, record.value,
                    RecordRef(record.topic, record.partition, record.offset), record.headers,
                )
                span.set_attribute("babelstream.route", out.kind)
                span.set_attribute("messaging.destination.name", out.topic)
                # The next hop continues the trace as a child of this route span.
                batch.outgoing.append(Outgoing(
                    out.topic, out.key, out.value, inject_headers(out.headers, span), out.kind,
                ))
