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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import faust
from faust.types import EventT, StreamT

from pipeline.cache import TwoLevelCache
from pipeline.chain import EngineRunner, TranslationChain, WorkItem
from pipeline.codec import Accepted, RecordRef, decode_request
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import Translator
from pipeline.messages import Headers
from pipeline.pairs import DLQ_TOPIC, REQUESTS_TOPIC, Pair, bulk_topic, pair_topic
from pipeline.routing import Router, request_digest, result_topic
from pipeline.scheduling import BULK, INTERACTIVE, PriorityGate
from pipeline.settings import Settings
from workers.dedup import FaustDedupWindow
from workers.stats import WorkerStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedPair:
    """A pair this worker translates, with its loaded engine."""

    pair: Pair
    model_id: str
    translator: Translator


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
                out = router.route(
                    msg.key, msg.value, RecordRef(msg.topic, msg.partition, msg.offset),
                    _headers(event),
                )
                ctx.stats.routed(out.kind)
                await send(out.topic, out.key, out.value, out.headers)

        app.agent(topic(REQUESTS_TOPIC), name="router", concurrency=s.worker.concurrency)(route)

    for entry in served:
        _add_pair_agents(app, ctx, entry, topic, send)

    @app.page("/babelstream/stats")
    async def stats_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return web.json(ctx.stats.snapshot())

    return app


def _add_pair_agents(app, ctx, entry, topic, send) -> None:  # type: ignore[no-untyped-def]
    s = ctx.settings
    window_s = s.worker.dedup_window_s
    table = app.Table(
        f"dedup-{entry.pair.id}", default=dict, partitions=s.kafka.pair_partitions
    ).tumbling(window_s, expires=2 * window_s)
    window = FaustDedupWindow(table, window_s)
    batcher = TokenBudgetBatcher(token_budget=s.worker.token_budget)

    for priority, topic_name in ((INTERACTIVE, pair_topic(entry.pair)),
                                 (BULK, bulk_topic(entry.pair))):
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
        )(_translation_agent(ctx, chain, window, send, entry.model_id))


def _translation_agent(ctx, chain, window, send, model_id):  # type: ignore[no-untyped-def]
    s = ctx.settings

    async def translate(stream: StreamT) -> None:
        async for events in stream.take_events(s.worker.max_messages, within=s.worker.max_wait_s):
            items: list[WorkItem] = []
            by_digest: dict[str, EventT] = {}
            headers: dict[str, Headers] = {}
            for event in events:
                msg = event.message
                ref = RecordRef(msg.topic, msg.partition, msg.offset)
                decoded = decode_request(msg.key, msg.value, ref, s.limits)
                if not isinstance(decoded, Accepted):
                    # Someone produced straight to a work topic, bypassing the router.
                    await send(DLQ_TOPIC, msg.key, decoded.dead_letter.to_json(), _headers(event))
                    continue
                request = decoded.request
                item = WorkItem(request, request_digest(request, model_id))
                items.append(item)
                by_digest.setdefault(item.digest, event)
                headers[request.request_id] = _headers(event)
            if not items:
                continue
            window.bind(by_digest)
            results, stats = await chain.process(items)
            ctx.stats.record(stats)
            for item, result in zip(items, results, strict=True):
                await send(
                    result_topic(item.request), result.request_id.encode(), result.to_json(),
                    headers[result.request_id],
                )

    return translate
