"""OpenTelemetry tracing: provider set-up and W3C trace context in Kafka headers.

Trace context travels in Kafka record headers as W3C ``traceparent`` /
``tracestate`` (written and read by OpenTelemetry's own propagators), from
the producer through the router and the worker to the result:

* ``submit`` (client, one per request): child of the caller's context, or of
  a ``traceparent`` the caller put in the headers; injected into the request.
* ``route`` (router): child of the request's context; re-injected into the
  record forwarded to the pair topic (or the DLQ / error result).
* ``batch`` (worker, one per micro-batch): a trace of its own, with a span
  *link* to each request it carries.
* ``translate`` (worker, one per request): child of the request's context,
  linked to its batch; the result is produced with this span's context.

A third-party producer that sets its own ``traceparent`` header gets its
trace continued. Exporters: OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set, the console by setting, JSON lines into a file by setting (tests), or
any :class:`SpanExporter` handed to :func:`setup_tracing`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Link, Span, SpanKind

from pipeline.contract.messages import Headers
from pipeline.settings import ObservabilitySettings

log = logging.getLogger(__name__)

TRACER_NAME = "babelstream"
TRACE_HEADERS = ("traceparent", "tracestate")

# Span names (one place, like the metric names in pipeline.observability.metrics).
SPAN_SUBMIT = "submit"
SPAN_ROUTE = "route"
# a tenant's own ingress onto the shared one (workers/tenant_ingress.py)
SPAN_ADMIT = "admit"
SPAN_BATCH = "batch"
SPAN_TRANSLATE = "translate"

_setup_lock = threading.Lock()


class _HeadersGetter(Getter[Sequence[tuple[str, bytes]]]):
    """Reads a W3C field from a Kafka header list (last value wins, like a map)."""

    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        values = [v for k, v in carrier if k.lower() == key]
        if not values:
            return None
        value = values[-1]
        return [value.decode("latin-1") if isinstance(value, bytes) else str(value)]

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]


class _DictSetter(Setter[dict[str, str]]):
    def set(self, carrier: dict[str, str], key: str, value: str) -> None:
        carrier[key] = value


_GETTER = _HeadersGetter()
_SETTER = _DictSetter()


# A proxy: it serves the provider installed later, and fetching a tracer per span would
# cost a lookup on every span of the hot path.
_TRACER = trace.get_tracer(TRACER_NAME)


def tracer() -> trace.Tracer:
    """The project's tracer (from the global provider; no-op until one is set up)."""
    return _TRACER


def extract_context(headers: Iterable[tuple[str, bytes]] | None) -> Context:
    """The trace context carried by Kafka headers (an empty context when none)."""
    return propagate.extract(list(headers or []), getter=_GETTER, context=Context())


def has_trace_context(headers: Iterable[tuple[str, bytes]] | None) -> bool:
    """Whether the headers carry a valid ``traceparent``."""
    ctx = extract_context(headers)
    return trace.get_current_span(ctx).get_span_context().is_valid


def inject_headers(
    headers: Iterable[tuple[str, bytes]] | None,
    span: Span | None = None,
) -> Headers:
    """``headers`` with the trace context of ``span`` (default: the current one).

    Existing propagation headers are replaced; other headers are kept in
    order. When there is no valid span (tracing off), the headers are
    returned unchanged, so an upstream ``traceparent`` still travels on.
    """
    out = list(headers or [])
    ctx = trace.set_span_in_context(span) if span is not None else None
    fields: dict[str, str] = {}
    propagate.inject(fields, context=ctx, setter=_SETTER)
    if "traceparent" not in fields:
        return out
    kept = [(k, v) for k, v in out if k.lower() not in fields]
    return kept + [(k, v.encode("latin-1")) for k, v in fields.items()]


def span_context_of(headers: Iterable[tuple[str, bytes]] | None) -> trace.SpanContext:
    """The remote span context in ``headers`` (invalid when none)."""
    return trace.get_current_span(extract_context(headers)).get_span_context()


def links_for(contexts: Iterable[trace.SpanContext]) -> list[Link]:
    """Span links to every valid, distinct span context (the ``batch`` span's links)."""
    seen: set[tuple[int, int]] = set()
    links = []
    for sc in contexts:
        key = (sc.trace_id, sc.span_id)
        if sc.is_valid and key not in seen:
            seen.add(key)
            links.append(Link(sc))
    return links


def start_consumer_span(
    name: str,
    headers: Iterable[tuple[str, bytes]] | None,
    attributes: Mapping[str, Any] | None = None,
    links: Sequence[Link] | None = None,
) -> Span:
    """A span that continues the trace in ``headers`` (not made current)."""
    return tracer().start_span(
        name,
        context=extract_context(headers),
        kind=SpanKind.CONSUMER,
        attributes=dict(attributes or {}),
        links=links,
    )


class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span as one JSON object per line to a file.

    Meant for tests and debugging: another process (a test) reads the spans
    a worker subprocess exported.
    """

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = [json.dumps(span_to_dict(span), default=str) + "\n" for span in spans]
        with self._lock, self._path.open("a", encoding="utf-8") as out:
            out.writelines(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def span_to_dict(span: ReadableSpan) -> dict[str, Any]:
    """A plain-JSON view of a finished span (ids as W3C lowercase hex)."""
    sc = span.get_span_context()
    assert sc is not None
    return {
        "name": span.name,
        "trace_id": f"{sc.trace_id:032x}",
        "span_id": f"{sc.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "service": (span.resource.attributes.get(SERVICE_NAME) if span.resource else None),
    }


def read_span_file(path: Path) -> list[dict[str, Any]]:
    """Spans a :class:`JsonLinesSpanExporter` wrote (empty when the file is absent)."""
    if not Path(path).exists():
        return []
    with Path(path).open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def setup_tracing(
    settings: ObservabilitySettings,
    *,
    exporters: Sequence[SpanExporter] = (),
    service_name: str | None = None,
) -> TracerProvider | None:
    """Install the global SDK tracer provider with the configured exporters.

    Exporters: OTLP/HTTP (batched) when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; console and JSON-lines file
    by setting; plus ``exporters`` (e.g. an in-memory one in tests), exported
    synchronously. Calling it again adds the new exporters to the provider
    already installed (OpenTelemetry allows one global provider per process).

    With no exporter at all nothing is installed (None): spans nobody exports would
    still be recorded, at a cost on every request. The API's own tracer then
    passes an upstream trace context on unchanged (``inject_headers``).
    """
    with _setup_lock:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            provider = current
        else:
            configured = _configured_exporters(settings)
            if not configured and not exporters:
                return None
            resource = Resource.create({SERVICE_NAME: service_name or settings.service_name})
            provider = TracerProvider(resource=resource)
            trace.set_tracer_provider(provider)
            for exporter in configured:
                processor = (
                    BatchSpanProcessor(exporter)
                    if _is_otlp(exporter)
                    else SimpleSpanProcessor(exporter)
                )
                provider.add_span_processor(processor)
        for exporter in exporters:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        return provider


def _is_otlp(exporter: SpanExporter) -> bool:
    return type(exporter).__module__.startswith("opentelemetry.exporter.otlp")


def _configured_exporters(settings: ObservabilitySettings) -> list[SpanExporter]:
    exporters: list[SpanExporter] = []
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        # The exporter reads the endpoint, headers, timeout... from the OTEL_ env itself.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter())
        log.info("exporting traces over OTLP/HTTP")
    if settings.console_exporter:
        # stderr: spans must not mix into a command's output (`submit` prints request ids)
        exporters.append(ConsoleSpanExporter(out=sys.stderr))
    if settings.span_file is not None:
        exporters.append(JsonLinesSpanExporter(settings.span_file))
    return exporters


def shutdown_tracing() -> None:
    """Flush and stop the global provider's exporters (it also happens at exit)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()
        provider.shutdown()
