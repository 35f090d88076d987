"""route: each ingress record to its pair's work topic, the DLQ, or an error result."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from opentelemetry import trace

from pipeline.contract.codec import RecordRef
from pipeline.observability.tracing import SPAN_ROUTE, inject_headers, start_consumer_span
from pipeline.routing import Router
from pipeline.steps.base import Batch, Fields


class Route:
    """Decides where every ingress record goes.

    Reads: records. Sets: ``batch.outgoing``, in order: the routed request
    keyed by content digest; or a dead letter, then an ``error`` result for
    its sender when it has a usable request id; or an ``error`` result for a
    pair no model serves. Each carries a ``route`` span's trace context.
    Raises: nothing: bad input is a dead letter.
    """

    reads: ClassVar[Fields] = frozenset({"record"})
    sets: ClassVar[Fields] = frozenset({"outgoing"})

    def __init__(self, router: Router) -> None:
        self._router = router

    async def __call__(self, batch: Batch) -> None:
        for item in batch.pending():
            record = item.record
            span = start_consumer_span(
                SPAN_ROUTE,
                record.headers,
                {
                    "messaging.system": "kafka",
                    "messaging.source.name": record.topic,
                    "messaging.kafka.source.partition": record.partition,
                    "messaging.kafka.message.offset": record.offset,
                },
            )
            with trace.use_span(span, end_on_exit=True):
                outs = self._router.route(
                    record.key,
                    record.value,
                    RecordRef(record.topic, record.partition, record.offset),
                    record.headers,
                )
                span.set_attribute("babelstream.route", outs[0].kind)
                span.set_attribute("messaging.destination.name", outs[0].topic)
                # The next hop continues the trace as a child of this route span; an answer
                # the router gives itself keeps its reply topic (the caller waits there)
                batch.outgoing.extend(
                    replace(o, headers=inject_headers(o.headers, span)) for o in outs
                )
