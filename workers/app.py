"""The Faust application: a router agent plus translation agents per served pair.

Faust is only the shell here: it consumes, hands decoded requests to the
pure steps in ``pipeline/`` (router, translation chain) and produces what
they return. Offsets are committed after a batch's results are handed to the
producer, and Faust flushes the producer before every commit: at-least-once.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import faust
from faust.types import EventT, StreamT
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from pipeline import metrics
from pipeline.cache import TwoLevelCache
from pipeline.chain import EngineRunner, TranslationChain, WorkItem
from pipeline.codec import Accepted, RecordRef, decode_request
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import Translator
from pipeline.messages import Headers, TranslationResult
from pipeline.pairs import DLQ_TOPIC, REQUESTS_TOPIC, Pair, bulk_topic, pair_topic
from pipeline.routing import Router, request_digest, result_topic
from pipeline.scheduling import BULK, INTERACTIVE, PriorityGate
from pipeline.settings import Settings
from pipeline.tracing import (
    SPAN_BATCH,
    SPAN_ROUTE,
    SPAN_TRANSLATE,
    extract_context,
    inject_headers,
    links_for,
    span_context_of,
    start_consumer_span,
    tracer,
)
from workers.dedup import FaustDedupWindow
from workers.stats import WorkerStats

log = logging.getLogger(__name__)

Send = Callable[[str, bytes | None, bytes, Headers], Awaitable[None]]


@dataclass(frozen=True)
class ServedPair:
    """A pair this worker translates, with its loaded engine."""

    pair: Pair
    model_id: str
    translator: Translator
    compute_type: str = "unknown"


@dataclass
class WorkerContext:
    """What the agents share: settings, caches, the engine gate and counters."""

    settings: Settings
    cache: TwoLevelCache
    worker_name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    gate: PriorityGate = field(default_factory=PriorityGate)
    stats: WorkerStats = field(default_factory=WorkerStats)


def _headers(event: EventT) -> Headers:
    raw = event.headers or {}
    items = raw.items() if isinstance(raw, Mapping) else raw
    return [(k, v if isinstance(v, bytes) else str(v).encode()) for k, v in items]


def create_app(
    ctx: WorkerContext,
    served: Sequence[ServedPair],
    deployment_models: Mapping[str, str],
    *,
    app_id: str = "babelstream",
    with_router: bool = True,
) -> faust.App:
    """Build the Faust app.

    ``deployment_models`` maps every pair of the deployment to its model id
    (the router forwards pairs that other worker groups serve); ``served``
    are the pairs this process translates.
    """
    s = ctx.settings
    datadir = s.worker.data_dir / app_id
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
        broker=[f"kafka://{hp}" for hp in s.kafka.bootstrap_servers.split(",")],
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=s.kafka.pair_partitions,
        topic_replication_factor=1,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        datadir=str(datadir),
        web_port=s.worker.web_port,
        web_host="127.0.0.1",
        web_enabled=True,
        broker_commit_interval=1.0,
    )
    topics: dict[str, faust.TopicT] = {}

    def topic(name: str) -> faust.TopicT:
        if name not in topics:
            topics[name] = app.topic(name, key_type=bytes, value_type=bytes)
        return topics[name]

    async def send(name: str, key: bytes | None, value: bytes, headers: Headers) -> None:
        await topic(name).send(key=key, value=value, headers=headers)

    if with_router:
        router = Router(deployment_models, s.limits, worker=ctx.worker_name)

        async def route(stream: StreamT) -> None:
            async for event in stream.events():
                msg = event.message
                span = start_consumer_span(SPAN_ROUTE, _headers(event), {
                    "messaging.system": "kafka",
                    "messaging.source.name": msg.topic,
                    "messaging.kafka.source.partition": msg.partition,
                    "messaging.kafka.message.offset": msg.offset,
                })
                with trace.use_span(span, end_on_exit=True):
                    out = router.route(
                        msg.key, msg.value, RecordRef(msg.topic, msg.partition, msg.offset),
                        _headers(event),
                    )
                    span.set_attribute("babelstream.route", out.kind)
                    span.set_attribute("messaging.destination.name", out.topic)
                    ctx.stats.routed(out.kind)
                    metrics.record_route(out.kind)
                    # Forward the trace: the next hop is a child of this route span.
                    await send(out.topic, out.key, out.value, inject_headers(out.headers, span))

        app.agent(topic(REQUESTS_TOPIC), name="router", concurrency=s.worker.concurrency)(route)

    for entry in served:
        _add_pair_agents(app, ctx, entry, topic, send)

    cache_errors = metrics.CacheErrorTracker()

    @app.timer(interval=s.observability.sample_interval_s)
    async def sample_metrics() -> None:
        await _sample_metrics(app, ctx, cache_errors)

    @app.page("/babelstream/stats")
    async def stats_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return web.json(ctx.stats.snapshot())

    return app


def _add_pair_agents(
    app: faust.App, ctx: WorkerContext, entry: ServedPair,
    topic: Callable[[str], faust.TopicT], send: Send,
) -> None:
    s = ctx.settings
    window_s = s.worker.dedup_window_s
    table = app.Table(
        f"dedup-{entry.pair.id}", default=dict, partitions=s.kafka.pair_partitions
    ).tumbling(window_s, expires=2 * window_s)
    w = s.worker
    for priority, topic_name, take, budget in (
        (INTERACTIVE, pair_topic(entry.pair), w.max_messages, w.token_budget),
        (BULK, bulk_topic(entry.pair), w.bulk_max_messages, w.bulk_token_budget),
    ):
        # One adapter per agent: each binds its own batch's events (same table).
        window = FaustDedupWindow(table, window_s)
        batcher = TokenBudgetBatcher(token_budget=budget)
        chain = TranslationChain(
            pair=entry.pair,
            engine=EngineRunner(entry.translator, batcher, ctx.gate, priority),
            model_id=entry.model_id,
            cache=ctx.cache,
            window=window,
            default_timeout_ms=s.limits.default_timeout_ms,
            worker=ctx.worker_name,
        )
        app.agent(
            topic(topic_name), name=f"translate-{topic_name}", concurrency=1
        )(_translation_agent(ctx, chain, window, send, entry, take))


def _translation_agent(
    ctx: WorkerContext, chain: TranslationChain, window: FaustDedupWindow, send: Send,
    entry: ServedPair, take: int,
) -> Callable[[StreamT], Awaitable[None]]:
    s = ctx.settings
    model_id = entry.model_id
    pair_id = entry.pair.id

    async def translate(stream: StreamT) -> None:
        async for events in stream.take_events(take, within=s.worker.max_wait_s):
            items: list[WorkItem] = []
            item_headers: list[Headers] = []
            by_digest: dict[str, EventT] = {}
            for event in events:
                msg = event.message
                headers = _headers(event)
                ref = RecordRef(msg.topic, msg.partition, msg.offset)
                decoded = decode_request(msg.key, msg.value, ref, s.limits)
                if not isinstance(decoded, Accepted):
                    # Someone produced straight to a work topic, bypassing the router.
                    await send(DLQ_TOPIC, msg.key, decoded.dead_letter.to_json(), headers)
                    continue
                request = decoded.request
                item = WorkItem(request, request_digest(request, model_id))
                items.append(item)
                item_headers.append(headers)
                by_digest.setdefault(item.digest, event)
            if not items:
                continue
            window.bind(by_digest)
            topic_name = events[0].message.topic
            # One span per micro-batch, in a trace of its own, linked to every request.
            batch_span = tracer().start_span(
                SPAN_BATCH, context=Context(), kind=SpanKind.CONSUMER,
                links=links_for(span_context_of(h) for h in item_headers),
                attributes={
                    "messaging.system": "kafka",
                    "messaging.source.name": topic_name,
                    "messaging.batch.message_count": len(items),
                    "babelstream.pair": pair_id,
                    "babelstream.model": model_id,
                    "babelstream.compute_type": entry.compute_type,
                    "babelstream.batch_size": len(items),
                },
            )
            batch_link = [Link(batch_span.get_span_context())]
            # One span per request, continuing the request's own trace.
            spans = [
                tracer().start_span(
                    SPAN_TRANSLATE, context=extract_context(h), kind=SpanKind.CONSUMER,
                    links=batch_link,
                    attributes={"babelstream.request_id": item.request.request_id},
                )
                for item, h in zip(items, item_headers, strict=True)
            ]
            began = time.perf_counter()
            with trace.use_span(batch_span, end_on_exit=False):
                results, stats = await chain.process(items)
            if stats.failure:
                batch_span.set_status(Status(StatusCode.ERROR, stats.failure))
            duration = time.perf_counter() - began
            ctx.stats.record(stats)
            metrics.record_batch(pair_id, stats, results, duration)
            batch_span.set_attribute("babelstream.engine_texts", stats.engine_texts)
            batch_span.set_attribute("babelstream.timeouts", stats.timeouts)
            batch_span.set_attribute("babelstream.errors", stats.errors)
            batch_span.end()
            for item, result, span, h in zip(items, results, spans, item_headers, strict=True):
                _finish_translate_span(span, result, entry, len(items))
                # The result carries the request's trace (this translate span).
                await send(
                    result_topic(item.request), result.request_id.encode(), result.to_json(),
                    inject_headers(h, span),
                )

    return translate


def _finish_translate_span(
    span: Span, result: TranslationResult, entry: ServedPair, batch_size: int
) -> None:
    attributes = {
        "babelstream.pair": entry.pair.id,
        "babelstream.model": result.model or entry.model_id,
        "babelstream.compute_type": entry.compute_type,
        "babelstream.batch_size": batch_size,
        "babelstream.engine_batch_size": result.batch_size,
        "babelstream.input_tokens": result.input_tokens,
        "babelstream.output_tokens": result.output_tokens,
        "babelstream.cache": result.cache or "none",
        "babelstream.status": result.status,
        "babelstream.latency_ms": result.latency_ms,
    }
    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if result.status == "error":
        span.set_status(Status(StatusCode.ERROR, result.error or "error"))
    span.end()


async def _sample_metrics(
    app: faust.App, ctx: WorkerContext, cache_errors: metrics.CacheErrorTracker
) -> None:
    """Sample consumer lag (highwater - committed, per assigned partition) and cache errors."""
    if ctx.cache.l2 is not None:
        cache_errors.update(ctx.cache.l2.errors)
    try:
        consumer = app.consumer
        assigned = consumer.assignment()
        if not assigned:
            return
        highwaters = await consumer.highwaters(*assigned)
        # Faust keeps the offsets it committed (next offset to read), like Kafka does.
        committed = getattr(consumer, "_committed_offset", {})
        lag: dict[tuple[str, int], int] = {}
        for tp in assigned:
            end = highwaters.get(tp)
            done = committed.get(tp)
            if done is None:
                done = await consumer.position(tp)
            if end is not None and done is not None:
                lag[(tp.topic, tp.partition)] = end - done
        metrics.set_consumer_lag(lag)
    except Exception as exc:  # a rebalance in progress; try again next time
        log.debug("consumer lag sample failed: %s", exc)
