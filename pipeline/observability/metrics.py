"""Prometheus metrics of a worker and of the gateway: every metric name is declared here,
and only here.

Workers serve theirs at ``/metrics`` on ``observability.metrics_port`` (9464
by default); the gateway serves its own (``babelstream_gateway_*``, in
:data:`GATEWAY_REGISTRY`) at ``GET /metrics`` on its port. Labels use pair
ids (``en_de``), the same ids as topics and config. Metrics live in registries
of their own, so tests and embedding processes do not collide with
``prometheus_client``'s global one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pipeline.contract.messages import DEFAULT_TENANT, TranslationResult

if TYPE_CHECKING:
    from pipeline.steps.base import BatchStats

REGISTRY = CollectorRegistry(auto_describe=True)
# submission-to-result latency, seconds (requests and tenants alike)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

REQUESTS = Counter(
    "babelstream_requests",
    "Results produced by workers, by pair, status (ok|timeout|error) and cache level "
    "(miss|l1|l2|window|none).",
    ["pair", "status", "cache"],
    registry=REGISTRY,
)
ROUTED = Counter(
    "babelstream_routed",
    "Ingress records the router handled, by outcome (routed|dead_letter|unsupported).",
    ["kind"],
    registry=REGISTRY,
)
TENANT_INGRESS = Counter(
    "babelstream_tenant_ingress",
    "Records of tenants' own ingress topics, by tenant and outcome "
    "(forwarded|tenant_mismatch|reply_topic_not_owned).",
    ["tenant", "outcome"],
    registry=REGISTRY,
)
BATCH_SIZE = Histogram(
    "babelstream_batch_size",
    "Requests per micro-batch taken from a model's work topic (every pair of the model).",
    ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    registry=REGISTRY,
)
ENGINE_BATCH_SIZE = Histogram(
    "babelstream_engine_batch_size",
    "Distinct texts per engine sub-batch (after dedup, caches and token budgeting); the "
    "texts of every pair of one model share sub-batches.",
    ["model"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    registry=REGISTRY,
)
BATCH_DURATION = Histogram(
    "babelstream_batch_duration_seconds",
    "Time the translation chain spent on one micro-batch.",
    ["model"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
REQUEST_LATENCY = Histogram(
    "babelstream_request_latency_seconds",
    "Submission to result latency of each request (the result's latency_ms).",
    ["pair", "status"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
ENGINE_TOKENS = Counter(
    "babelstream_engine_tokens",
    "Tokens the engine read (direction=input) and wrote (direction=output).",
    ["model", "direction"],
    registry=REGISTRY,
)
ENGINE_SECONDS = Counter(
    "babelstream_engine_seconds",
    "Wall time spent inside the engine (rate(tokens) / rate(seconds) = tokens/s).",
    ["model"],
    registry=REGISTRY,
)
ENGINE_TOKENS_PER_SECOND = Gauge(
    "babelstream_engine_tokens_per_second",
    "Output tokens per second of the engine in the latest micro-batch that used it.",
    ["model"],
    registry=REGISTRY,
)
COMMITTED_LAG = Gauge(
    "babelstream_consumer_committed_lag",
    "Records of each assigned input partition not yet committed by the worker's group "
    "(log end - committed offset, read from the brokers), sampled periodically. A value "
    "that grows while the worker is busy means a stalled commit.",
    ["group", "topic", "partition"],
    registry=REGISTRY,
)
WORKER_READY = Gauge(
    "babelstream_worker_ready",
    "1 while the worker serves (joined, partitions assigned, tables recovered), else 0.",
    registry=REGISTRY,
)
BATCH_RETRIES = Counter(
    "babelstream_batch_retries",
    "Micro-batch attempts that failed transiently and were retried (nothing committed).",
    ["model"],
    registry=REGISTRY,
)
MODEL_LOAD_SECONDS = Histogram(
    "babelstream_model_load_seconds",
    "Time to load a model into the worker (at start, or on first use under a memory budget).",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)
MODEL_EVICTIONS = Counter(
    "babelstream_model_evictions",
    "Models unloaded to make room for another under engine.max_loaded_models/bytes.",
    ["model"],
    registry=REGISTRY,
)
BATCH_FAILING_SECONDS = Gauge(
    "babelstream_batch_failing_seconds",
    "How long an agent's current micro-batch has been failing transiently and retried "
    "(its partitions paused, nothing committed past it); 0 while its batches go through.",
    ["agent"],
    registry=REGISTRY,
)
ISOLATED = Counter(
    "babelstream_isolated_requests",
    "Requests set apart because a step failed on them alone while a canary request "
    "passed, by agent and how they ended (internal_error|quarantined).",
    ["agent", "reason"],
    registry=REGISTRY,
)
QUARANTINED_KNOWN = Gauge(
    "babelstream_quarantined_records",
    "Records in translate.quarantine that the worker knows (none runs again until released).",
    registry=REGISTRY,
)
CACHE_ERRORS = Counter(
    "babelstream_cache_errors",
    "Failed Redis (L2 cache) operations; requests keep being served from L1.",
    registry=REGISTRY,
)
CACHE_CORRUPT = Counter(
    "babelstream_cache_corrupt_entries",
    "L2 cache entries that could not be read (treated as misses).",
    registry=REGISTRY,
)
TENANT_REQUESTS = Counter(
    "babelstream_tenant_requests",
    "Results by pair, tenant (requests without one: default) and status "
    "(ok|timeout|error|cancelled|rejected).",
    ["pair", "tenant", "status"],
    registry=REGISTRY,
)
TENANT_LATENCY = Histogram(
    "babelstream_tenant_latency_seconds",
    "Submission to result latency by pair and tenant.",
    ["pair", "tenant"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUOTA_CHECKS = Counter(
    "babelstream_quota_checks",
    "Requests checked against their tenant's quota, by outcome (admitted|rejected).",
    ["tenant", "outcome"],
    registry=REGISTRY,
)
QUOTA_ERRORS = Counter(
    "babelstream_quota_errors",
    "Quota checks that could not reach Redis (those requests were admitted).",
    registry=REGISTRY,
)
FAIR_SHARE_HELD = Gauge(
    "babelstream_fair_share_held",
    "Fetched requests held for fair share (not yet in an engine round), by topic and tenant.",
    ["topic", "tenant"],
    registry=REGISTRY,
)
FAIR_SHARE_ROUND_LIMIT = Gauge(
    "babelstream_fair_share_round_limit_chars",
    "Characters a lone tenant's round may hold (tenants.max_round_s at the measured pace of "
    "the topic's rounds), by topic; absent until a round was measured.",
    ["topic"],
    registry=REGISTRY,
)
CANCELS_KNOWN = Gauge(
    "babelstream_cancels_known",
    "Live cancels (request ids and bulk jobs) the worker holds.",
    registry=REGISTRY,
)
REPLY_COPIES = Counter(
    "babelstream_reply_copies",
    "Results copied to their caller's reply topic, by outcome (copied|gone: the topic was "
    "deleted|failed: not delivered in time; the result is on translate.results either way).",
    ["outcome"],
    registry=REGISTRY,
)

ENGINE_PADDING = Histogram(
    "babelstream_engine_padding_ratio",
    "Pad tokens / padded tokens of each engine sub-batch (cost-based bucketing keeps it low).",
    ["model"],
    buckets=(0.0, 0.02, 0.05, 0.08, 0.12, 0.2, 0.3, 0.5, 0.75, 1.0),
    registry=REGISTRY,
)
ENGINE_CALL_SECONDS = Histogram(
    "babelstream_engine_call_seconds",
    "Duration of each engine call (one sub-batch), by model and priority (interactive|bulk).",
    ["model", "priority"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
BATCHING_KNOB = Gauge(
    "babelstream_batching_knob",
    "Adaptive batching controller's current knobs and estimates, by model and knob "
    "(max_wait_seconds|max_messages|token_budget|throughput_mode|latency_share|"
    "queue_delay_seconds|service_seconds|arrivals_per_second|cost_correction).",
    ["model", "knob"],
    registry=REGISTRY,
)

# Exposition names (counters gain a ``_total`` sample suffix).
METRIC_NAMES: tuple[str, ...] = (
    "babelstream_requests_total",
    "babelstream_routed_total",
    "babelstream_tenant_ingress_total",
    "babelstream_batch_size",
    "babelstream_engine_batch_size",
    "babelstream_batch_duration_seconds",
    "babelstream_request_latency_seconds",
    "babelstream_engine_tokens_total",
    "babelstream_engine_seconds_total",
    "babelstream_engine_tokens_per_second",
    "babelstream_consumer_committed_lag",
    "babelstream_worker_ready",
    "babelstream_batch_retries_total",
    "babelstream_batch_failing_seconds",
    "babelstream_model_load_seconds",
    "babelstream_model_evictions_total",
    "babelstream_isolated_requests_total",
    "babelstream_quarantined_records",
    "babelstream_cache_errors_total",
    "babelstream_cache_corrupt_entries_total",
    "babelstream_tenant_requests_total",
    "babelstream_tenant_latency_seconds",
    "babelstream_quota_checks_total",
    "babelstream_quota_errors_total",
    "babelstream_fair_share_held",
    "babelstream_fair_share_round_limit_chars",
    "babelstream_cancels_known",
    "babelstream_reply_copies_total",
    "babelstream_engine_padding_ratio",
    "babelstream_engine_call_seconds",
    "babelstream_batching_knob",
)

# The gateway's own (``babelstream gateway``, GET /metrics with ``gateway.metrics`` on), in a
# registry of their own: a gateway serves these, a worker the ones above.
GATEWAY_REGISTRY = CollectorRegistry(auto_describe=True)
GATEWAY_PREFIX = "babelstream_gateway_"
GATEWAY_CALLS = Counter(
    "babelstream_gateway_calls",
    "HTTP calls the gateway answered, by route (its path template; unmatched: no route) "
    "and status.",
    ["route", "status"],
    registry=GATEWAY_REGISTRY,
)
GATEWAY_CALL_SECONDS = Histogram(
    "babelstream_gateway_call_seconds",
    "Seconds from a call's arrival to its answer, by route.",
    ["route"],
    buckets=LATENCY_BUCKETS,
    registry=GATEWAY_REGISTRY,
)
GATEWAY_CALLS_IN_FLIGHT = Gauge(
    "babelstream_gateway_calls_in_flight",
    "Calls being answered now (every process of the gateway together).",
    multiprocess_mode="livesum",
    registry=GATEWAY_REGISTRY,
)
GATEWAY_TEXTS = Counter(
    "babelstream_gateway_texts",
    "Texts of /translate calls (a list counts each), by source: given, or auto.",
    ["source"],
    registry=GATEWAY_REGISTRY,
)
GATEWAY_CHARACTERS = Counter(
    "babelstream_gateway_characters",
    "Characters of /translate calls, as char_limit counts them.",
    registry=GATEWAY_REGISTRY,
)
GATEWAY_METRIC_NAMES: tuple[str, ...] = (
    "babelstream_gateway_calls_total",
    "babelstream_gateway_call_seconds",
    "babelstream_gateway_calls_in_flight",
    "babelstream_gateway_texts_total",
    "babelstream_gateway_characters_total",
)


def record_batch(
    model: str, stats: BatchStats, results: Iterable[TranslationResult], duration_s: float
) -> None:
    """Count one processed micro-batch of ``model`` and its results (by their pairs)."""
    BATCH_SIZE.labels(model).observe(stats.size)
    if stats.attempts > 1:
        BATCH_RETRIES.labels(model).inc(stats.attempts - 1)
    BATCH_DURATION.labels(model).observe(duration_s)
    for size in stats.engine_batches:
        ENGINE_BATCH_SIZE.labels(model).observe(size)
    for result in results:
        cache = result.cache if result.status == "ok" and result.cache else "none"
        REQUESTS.labels(result.pair, result.status, cache).inc()
        REQUEST_LATENCY.labels(result.pair, result.status).observe(result.latency_ms / 1000)
        tenant = result.tenant or DEFAULT_TENANT
        TENANT_REQUESTS.labels(result.pair, tenant, result.status).inc()
        TENANT_LATENCY.labels(result.pair, tenant).observe(result.latency_ms / 1000)
    if stats.engine_seconds > 0:
        ENGINE_TOKENS.labels(model, "input").inc(stats.engine_input_tokens)
        ENGINE_TOKENS.labels(model, "output").inc(stats.engine_output_tokens)
        ENGINE_SECONDS.labels(model).inc(stats.engine_seconds)
        ENGINE_TOKENS_PER_SECOND.labels(model).set(
            stats.engine_output_tokens / stats.engine_seconds
        )


def record_quota(tenant: str, admitted: int, rejected: int) -> None:
    """Count one batch's quota checks of one tenant."""
    if admitted:
        QUOTA_CHECKS.labels(tenant, "admitted").inc(admitted)
    if rejected:
        QUOTA_CHECKS.labels(tenant, "rejected").inc(rejected)


def record_reply_copies(outcome: str, count: int) -> None:
    """Count reply copies by outcome (copied, gone, failed)."""
    if count:
        REPLY_COPIES.labels(outcome).inc(count)


def set_fair_share_held(topic: str, held: Mapping[str, int], known: set[str]) -> None:
    """Requests held per tenant on ``topic``; tenants in ``known`` and not held read 0."""
    for tenant in known | set(held):
        FAIR_SHARE_HELD.labels(topic, tenant).set(held.get(tenant, 0))


def set_fair_share_round_limit(topic: str, chars: float | None) -> None:
    """The bound on a lone tenant's next round on ``topic`` (``None``: unbounded, not set)."""
    if chars is not None:
        FAIR_SHARE_ROUND_LIMIT.labels(topic).set(chars)


def record_engine_call(model: str, priority: str, padding_ratio: float, seconds: float) -> None:
    """One engine sub-batch of ``model``: its padding and how long the call took."""
    ENGINE_PADDING.labels(model).observe(padding_ratio)
    ENGINE_CALL_SECONDS.labels(model, priority).observe(seconds)


def set_batching_knobs(model: str, values: Mapping[str, float]) -> None:
    """The adaptive batching controller's knobs and estimates for one model, by name."""
    for knob, value in values.items():
        BATCHING_KNOB.labels(model, knob).set(value)


def record_model_load(model: str, seconds: float) -> None:
    """A model was loaded (it took ``seconds``)."""
    MODEL_LOAD_SECONDS.labels(model).observe(seconds)


def record_model_eviction(model: str) -> None:
    """A model was unloaded to make room."""
    MODEL_EVICTIONS.labels(model).inc()


def record_isolated(agent: str, reason: str, count: int) -> None:
    """Requests of ``agent`` that the runner set apart, by how they ended."""
    ISOLATED.labels(agent, reason).inc(count)


def set_batch_failing(agent: str, seconds: float) -> None:
    """How long ``agent``'s current batch has been failing (0: its batches go through)."""
    BATCH_FAILING_SECONDS.labels(agent).set(seconds)


def record_route(kind: str) -> None:
    """Count one ingress record the router handled."""
    ROUTED.labels(kind).inc()


def record_tenant_ingress(tenant: str, outcome: str) -> None:
    """Count one record of ``tenant``'s own ingress and what became of it."""
    TENANT_INGRESS.labels(tenant, outcome).inc()


def set_committed_lag(group: str, lag: Mapping[tuple[str, int], int]) -> None:
    """Replace the committed-lag gauges with a fresh sample ((topic, partition) -> records)."""
    COMMITTED_LAG.clear()
    for (topic, partition), value in lag.items():
        COMMITTED_LAG.labels(group, topic, str(partition)).set(max(0, value))


def set_worker_ready(ready: bool) -> None:
    WORKER_READY.set(1 if ready else 0)


class TotalTracker:
    """Turns a running total kept elsewhere (``RedisCache.errors``) into counter increments."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._seen = 0

    def update(self, total: int) -> None:
        """Add what ``total`` grew by since the last call."""
        if total > self._seen:
            self._counter.inc(total - self._seen)
        self._seen = max(self._seen, total)


def exposition() -> bytes:
    """The registry in Prometheus text format (what ``/metrics`` serves)."""
    return generate_latest(REGISTRY)


def gateway_exposition() -> bytes:
    """The gateway's metrics in Prometheus text format, of every process of the gateway.

    With several processes (``gateway.workers``) each writes its values to the folder
    named by ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode) and any
    of them answers for all; one process answers from its own registry.
    """
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        return generate_latest(GATEWAY_REGISTRY)
    merged = CollectorRegistry()
    collector = multiprocess.MultiProcessCollector(None, path=folder)  # type: ignore[no-untyped-call]
    merged.register(_Named(collector, GATEWAY_PREFIX))
    return generate_latest(merged)


class _Named(Collector):
    """The families of another collector whose names start with ``prefix`` (a gateway's
    processes also hold the worker metrics this module declares, never set there)."""

    def __init__(self, inner: Collector, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    def collect(self) -> Iterable[Metric]:
        return [m for m in self._inner.collect() if m.name.startswith(self._prefix)]


def start_metrics_server(host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve :data:`REGISTRY` at ``http://host:port/metrics`` from a daemon thread."""
    return start_http_server(port, addr=host, registry=REGISTRY)
