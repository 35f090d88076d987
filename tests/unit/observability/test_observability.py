"""Metrics exposition, trace-context headers, span export, the vendored chart library."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from pathlib import Path

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from pipeline.contract.messages import TranslationResult
from pipeline.engine.adaptive import AdaptiveBatching, ControllerLimits, state_values
from pipeline.engine.costs import CostModel
from pipeline.observability import metrics
from pipeline.observability.tracing import (
    JsonLinesSpanExporter,
    extract_context,
    has_trace_context,
    inject_headers,
    links_for,
    read_span_file,
    setup_tracing,
    span_context_of,
    tracer,
)
from pipeline.settings import PROJECT_ROOT, ObservabilitySettings, RedisSettings, Settings
from pipeline.steps.base import BatchStats
from pipeline.storage.cache import RedisCache


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    setup_tracing(ObservabilitySettings(), exporters=[exporter])
    return exporter


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def result(status: str = "ok", cache: str | None = "miss") -> TranslationResult:
    return TranslationResult(
        request_id="r1",
        source_lang="en",
        target_lang="de",
        pair="en_de",
        status=status,
        cache=cache,
        submitted_at=1000,
        completed_at=1250,
        latency_ms=250,
    )


class _FailingRedis:
    def mget(self, keys: list[str]) -> list[bytes | None]:
        raise redis.ConnectionError("down")

    def close(self) -> None:
        pass


def test_metrics_endpoint_exposes_every_declared_metric() -> None:
    stats = BatchStats(
        size=3,
        engine_batches=[2],
        engine_texts=2,
        engine_seconds=0.5,
        engine_input_tokens=10,
        engine_output_tokens=20,
        attempts=3,
    )
    metrics.record_batch("en_de", stats, [result(), result("timeout", None)], 0.6)
    metrics.record_route("routed")
    metrics.record_engine_call("en_de", "interactive", 0.04, 0.2)
    controller = AdaptiveBatching(ControllerLimits(p95_ms=500), CostModel(0.01, 0.0, 1e-4))
    metrics.set_batching_knobs("en_de", state_values(controller.state))
    metrics.set_committed_lag("babelstream", {("translate.requests.en_de", 0): 7})
    metrics.set_worker_ready(True)
    metrics.set_batch_failing("translate.requests.en_de", 12.5)
    metrics.record_isolated("translate.requests.en_de", "internal_error", 1)
    metrics.QUARANTINED_KNOWN.set(2)
    cache = RedisCache(RedisSettings(), client=_FailingRedis())  # type: ignore[arg-type]
    assert cache.get_many(["d1"]) == {}
    tracker = metrics.TotalTracker(metrics.CACHE_ERRORS)
    tracker.update(cache.errors)
    tracker.update(cache.errors)  # no growth, no increment

    port = free_port()
    server, _ = metrics.start_metrics_server("127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.shutdown()
    for name in metrics.METRIC_NAMES:
        assert re.search(rf"^# TYPE {name} (counter|gauge|histogram)$", text, re.M), name
    assert 'babelstream_requests_total{cache="miss",pair="en_de",status="ok"}' in text
    assert 'babelstream_requests_total{cache="none",pair="en_de",status="timeout"}' in text
    assert (
        'babelstream_consumer_committed_lag{group="babelstream",partition="0",'
        'topic="translate.requests.en_de"} 7.0'
    ) in text
    assert re.search(r"^babelstream_worker_ready 1\.0$", text, re.M)
    assert re.search(
        r'^babelstream_batch_failing_seconds\{agent="translate.requests.en_de"\} 12\.5$',
        text,
        re.M,
    )
    assert re.search(r'^babelstream_batch_retries_total\{model="en_de"\} 2\.0$', text, re.M)
    assert re.search(r'^babelstream_engine_tokens_per_second\{model="en_de"\} 40\.0$', text, re.M)
    assert re.search(r"^babelstream_cache_errors_total 1\.0$", text, re.M)
    assert 'babelstream_engine_padding_ratio_count{model="en_de"} 1.0' in text
    assert re.search(
        r'^babelstream_batching_knob\{knob="max_messages",model="en_de"\} '
        rf"{controller.knobs.max_messages}\.0$",
        text,
        re.M,
    )
    # every exposed babelstream metric is declared in pipeline.observability.metrics
    exposed = set(re.findall(r"^# TYPE (babelstream_\w+) (?:counter|histogram|gauge)$", text, re.M))
    assert {n for n in exposed if not n.endswith("_created")} <= set(metrics.METRIC_NAMES)


def test_inject_and_extract_trace_context(spans: InMemorySpanExporter) -> None:
    upstream = [("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01"), ("x-app", b"kept")]
    with tracer().start_as_current_span("parent", context=extract_context(upstream)) as span:
        headers = inject_headers(upstream, span)
    sc = span.get_span_context()
    assert sc.trace_id == int("1" * 32, 16)  # continued the upstream trace
    assert ("x-app", b"kept") in headers
    assert [k for k, _ in headers].count("traceparent") == 1
    assert dict(headers)["traceparent"] == f"00-{sc.trace_id:032x}-{sc.span_id:016x}-01".encode()
    remote = span_context_of(headers)
    assert remote.is_remote and (remote.trace_id, remote.span_id) == (sc.trace_id, sc.span_id)
    assert has_trace_context(headers) and not has_trace_context([("x-app", b"1")])


def test_inject_without_a_span_keeps_upstream_headers() -> None:
    upstream = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")]
    invalid = NonRecordingSpan(SpanContext(0, 0, is_remote=False))
    assert inject_headers(upstream, invalid) == upstream
    assert inject_headers(None, invalid) == []


def test_tracestate_travels(spans: InMemorySpanExporter) -> None:
    upstream = [
        ("traceparent", b"00-" + b"c" * 32 + b"-" + b"d" * 16 + b"-01"),
        ("tracestate", b"vendor=abc"),
    ]
    span = tracer().start_span("child", context=extract_context(upstream))
    span.end()
    assert dict(inject_headers([], span))["tracestate"] == b"vendor=abc"


def test_links_skip_invalid_and_duplicate_contexts() -> None:
    a = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1))
    b = SpanContext(3, 4, is_remote=True, trace_flags=TraceFlags(1))
    invalid = trace.INVALID_SPAN_CONTEXT
    links = links_for([a, invalid, a, b])
    assert [(link.context.trace_id, link.context.span_id) for link in links] == [(1, 2), (3, 4)]


def test_json_lines_exporter_round_trip(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = JsonLinesSpanExporter(path)
    link_to = SpanContext(5, 6, is_remote=True, trace_flags=TraceFlags(1))
    span = tracer().start_span("batch", links=links_for([link_to]), attributes={"n": 2})
    span.end()
    (finished,) = [s for s in spans.get_finished_spans() if s.name == "batch"]
    exporter.export([finished])
    (row,) = read_span_file(path)
    assert row["name"] == "batch" and row["attributes"] == {"n": 2}
    assert row["links"] == [{"trace_id": f"{5:032x}", "span_id": f"{6:016x}"}]
    assert row["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert read_span_file(tmp_path / "absent.jsonl") == []


def test_observability_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BABELSTREAM_OBSERVABILITY__METRICS_PORT", "9999")
    monkeypatch.setenv("BABELSTREAM_OBSERVABILITY__CONSOLE_EXPORTER", "true")
    monkeypatch.setenv("BABELSTREAM_DASHBOARD__PORT", "8123")
    settings = Settings()
    assert settings.observability.metrics_port == 9999
    assert settings.observability.console_exporter is True
    assert settings.dashboard.port == 8123
    assert Settings.model_fields["observability"].default.metrics_port == 9464


def test_vendored_chart_library_matches_package_lock() -> None:
    lock = json.loads((PROJECT_ROOT / "package-lock.json").read_text())
    version = lock["packages"]["node_modules/chart.js"]["version"]
    static = PROJECT_ROOT / "pipeline" / "sla" / "dashboard" / "static"
    vendored = static / "vendor" / "chart.umd.min.js"
    head = vendored.read_text(encoding="utf-8")[:200]
    assert f"Chart.js v{version}" in head, "run `make vendor` after changing package.json"
    page = (static / "index.html").read_text()
    assert "/static/vendor/chart.umd.min.js" in page and "://" not in page.split("<body")[0]


def test_without_an_exporter_nothing_records_and_an_upstream_trace_travels_on() -> None:
    """In a fresh process (one global provider per process): no exporter, no SDK provider;
    the consumer span is the upstream one's context, injected unchanged."""
    import subprocess
    import sys

    code = """
from pipeline.observability.tracing import inject_headers, setup_tracing, start_consumer_span
from pipeline.settings import ObservabilitySettings
assert setup_tracing(ObservabilitySettings()) is None
parent = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
span = start_consumer_span("route", [("traceparent", parent)])
assert not span.is_recording()
print(dict(inject_headers([("k", b"v")], span))["traceparent"].decode())
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
