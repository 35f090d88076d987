"""Traces across real Kafka hops, and the worker's Prometheus endpoint.

The test process exports its spans (``submit``) to an in-memory exporter; the
worker subprocess exports its spans (``route``, ``batch``, ``translate``) as
JSON lines into a file this test reads. Together they must form one trace
from ``submit`` to the result record.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import confluent_kafka
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pipeline.client import TranslationClient, build_requests
from pipeline.contract.messages import TranslationResult, now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC, RESULTS_TOPIC, Pair
from pipeline.observability.tracing import read_span_file, setup_tracing, span_to_dict
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import WorkerProcess
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")
TRACE_ATTRS = (
    "babelstream.pair",
    "babelstream.model",
    "babelstream.compute_type",
    "babelstream.batch_size",
    "babelstream.input_tokens",
    "babelstream.output_tokens",
    "babelstream.cache",
    "babelstream.status",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def memory_spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    setup_tracing(load_settings().observability, exporters=[exporter])
    return exporter


@pytest.fixture(scope="module")
def traced_worker(
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    span_file = tmp_path_factory.mktemp("spans") / "worker-spans.jsonl"
    metrics_port = free_port()
    env = {
        "BABELSTREAM_OBSERVABILITY__SPAN_FILE": str(span_file),
        "BABELSTREAM_OBSERVABILITY__METRICS_PORT": str(metrics_port),
        "BABELSTREAM_OBSERVABILITY__SAMPLE_INTERVAL_S": "0.5",
        "BABELSTREAM_OBSERVABILITY__SERVICE_NAME": "babelstream-test-worker",
        "BABELSTREAM_WORKER__WEB_PORT": str(free_port()),
    }
    log_path = PROJECT_ROOT / "var" / "log" / "test-tracing-worker.log"
    with WorkerProcess(settings, log_path=log_path, env=env) as worker:
        yield {"span_file": span_file, "metrics_port": metrics_port, "worker": worker}


def header(record: Any, name: str) -> str | None:
    values = [v for k, v in (record.headers or []) if k == name]
    return values[-1].decode() if values else None


def parse_traceparent(value: str | None) -> tuple[str, str]:
    assert value, "result record carries no traceparent"
    match = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}", value)
    assert match, value
    return match.group(1), match.group(2)


def await_result(tail: TopicTail, request_id: str) -> Any:
    def ours(records: list[Any]) -> list[Any]:
        return [r for r in records if TranslationResult.from_json(r.value).request_id == request_id]

    found = ours(tail.read_until(lambda rs: bool(ours(rs)), timeout_s=90))
    assert found, f"no result for {request_id}"
    return found[0]


T = TypeVar("T")


def poll_span_file(
    span_file: Path,
    select: Callable[[list[dict[str, Any]]], T],
    done: Callable[[T], bool],
    timeout_s: float = 15.0,
) -> T:
    """``select`` over the exported spans, read again until ``done`` or the timeout
    (spans reach the file when they end, not all at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        selected = select(read_span_file(span_file))
        if done(selected) or time.monotonic() > deadline:
            return selected
        time.sleep(0.2)


def worker_spans(
    span_file: Path, trace_id: str, names: set[str]
) -> dict[str, list[dict[str, Any]]]:
    """Spans of ``trace_id`` the worker exported, by name, once every name is there."""

    def by_name(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for span in spans:
            if span["trace_id"] == trace_id:
                found.setdefault(span["name"], []).append(span)
        return found

    return poll_span_file(span_file, by_name, lambda found: names <= set(found))


def linked_batches(span_file: Path, trace_id: str, span_id: str) -> list[dict[str, Any]]:
    """The batch spans linked to one request span, once there are any (a batch span ends
    after the request spans it carries)."""
    link = {"trace_id": trace_id, "span_id": span_id}
    return poll_span_file(
        span_file,
        lambda spans: [s for s in spans if s["name"] == "batch" and link in s["links"]],
        bool,
    )


def test_one_trace_from_submit_to_result(
    settings: Settings, traced_worker: dict[str, Any], memory_spans: InMemorySpanExporter
) -> None:
    span_file = traced_worker["span_file"]
    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    text = f"Hello tracing {uuid.uuid4().hex[:6]}"
    (request,) = build_requests([text], EN_XA)
    with TranslationClient(settings.kafka) as client:
        client.submit([request])
    record = await_result(results, request.request_id)
    results.close()
    result = TranslationResult.from_json(record.value)
    assert result.status == "ok"

    submits = [
        span_to_dict(s)
        for s in memory_spans.get_finished_spans()
        if s.name == "submit"
        and s.attributes
        and s.attributes.get("babelstream.request_id") == request.request_id
    ]
    assert len(submits) == 1
    submit = submits[0]
    trace_id, result_parent = parse_traceparent(header(record, "traceparent"))
    assert trace_id == submit["trace_id"], "the result is not in the submit span's trace"

    spans = worker_spans(span_file, trace_id, {"route", "translate"})
    assert set(spans) >= {"route", "translate"}, spans.keys()
    (route,) = spans["route"]
    translate = next(s for s in spans["translate"] if s["span_id"] == result_parent)
    # submit -> route -> translate -> result record
    assert route["parent_span_id"] == submit["span_id"]
    assert translate["parent_span_id"] == route["span_id"]
    assert route["kind"] == "CONSUMER" and submit["kind"] == "PRODUCER"
    assert route["attributes"]["babelstream.route"] == "routed"
    for name in TRACE_ATTRS:
        assert name in translate["attributes"], name
    attrs = translate["attributes"]
    assert attrs["babelstream.pair"] == "en_en-XA" and attrs["babelstream.status"] == "ok"
    assert attrs["babelstream.model"] == result.model
    assert attrs["babelstream.input_tokens"] == result.input_tokens
    assert attrs["babelstream.output_tokens"] == result.output_tokens
    assert attrs["babelstream.cache"] == result.cache
    assert attrs["babelstream.compute_type"] not in ("", "unknown")
    # batch: its own trace, linked to the request's context (the route span)
    (batch,) = linked_batches(span_file, trace_id, route["span_id"])
    assert batch["trace_id"] != trace_id and batch["parent_span_id"] is None
    assert batch["attributes"]["babelstream.batch_size"] >= 1
    assert {"trace_id": batch["trace_id"], "span_id": batch["span_id"]} in translate["links"]
    assert submit["service"] != translate["service"] == "babelstream-test-worker"


def test_third_party_traceparent_is_continued(
    settings: Settings, traced_worker: dict[str, Any]
) -> None:
    span_file = traced_worker["span_file"]
    trace_id, parent_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    traceparent = f"00-{trace_id}-{parent_id}-01"
    tracestate = "vendor=abc"
    request_id = f"foreign-{uuid.uuid4().hex}"
    doc = {
        "request_id": request_id,
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": "Good evening",
        "submitted_at": now_ms(),
    }

    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    producer = confluent_kafka.Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    producer.produce(
        REQUESTS_TOPIC,
        key=b"en_en-XA",
        value=json.dumps(doc).encode(),
        headers=[
            ("traceparent", traceparent.encode()),
            ("tracestate", tracestate.encode()),
            ("x-app", b"kept"),
        ],
    )
    assert producer.flush(30) == 0
    record = await_result(results, request_id)
    results.close()

    result_trace, result_parent = parse_traceparent(header(record, "traceparent"))
    assert result_trace == trace_id
    assert header(record, "tracestate") == tracestate
    assert header(record, "x-app") == "kept"
    spans = worker_spans(span_file, trace_id, {"route", "translate"})
    (route,) = spans["route"]
    assert route["parent_span_id"] == parent_id
    translate = next(s for s in spans["translate"] if s["span_id"] == result_parent)
    assert translate["parent_span_id"] == route["span_id"]
    assert linked_batches(span_file, trace_id, route["span_id"])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """Sum of the samples of ``name`` whose labels include ``labels`` (None: no sample)."""
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if (line.startswith(name + "{") or line.startswith(name + " "))
        and all(f'{k}="{v}"' in line for k, v in labels.items())
    ]
    return sum(values) if values else None


def test_worker_serves_prometheus_metrics(
    settings: Settings, traced_worker: dict[str, Any]
) -> None:
    port = traced_worker["metrics_port"]
    before = sample(scrape(port), "babelstream_requests_total", pair="en_en-XA", status="ok")
    with TranslationClient(settings.kafka) as client:
        replies = client.translate(
            build_requests([f"Metrics {uuid.uuid4().hex[:6]}", "Hello world"], EN_XA),
            timeout_s=60,
        )
    assert replies.all_ok
    deadline = time.monotonic() + 60
    while True:
        text = scrape(port)
        after = sample(text, "babelstream_requests_total", pair="en_en-XA", status="ok")
        lag = sample(
            text, "babelstream_consumer_committed_lag", topic="translate.work.babelstream-demo-enxa"
        )
        if (after or 0) >= (before or 0) + 2 and lag is not None:
            break
        assert time.monotonic() < deadline, text
        time.sleep(0.3)
    assert sample(text, "babelstream_batch_size_count", model="babelstream-demo-enxa")
    assert sample(text, "babelstream_request_latency_seconds_count", pair="en_en-XA")
    assert sample(text, "babelstream_routed_total", kind="routed")
    assert (
        sample(text, "babelstream_engine_tokens_per_second", model="babelstream-demo-enxa") or 0
    ) > 0
    assert sample(text, "babelstream_engine_tokens_total", direction="output")
    assert sample(text, "babelstream_cache_errors_total") == 0
    assert sample(text, "babelstream_worker_ready") == 1
    assert lag >= 0
