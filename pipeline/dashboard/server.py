"""aiohttp server of the SLA dashboard: a Kafka feed, a window store, SSE to browsers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import ValidationError

from pipeline.kafka_clients import aiokafka_options
from pipeline.messages import SlaWindow
from pipeline.settings import KafkaSettings, Settings

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
KEEPALIVE_S = 15.0

STORE_KEY = web.AppKey("store", "WindowStore")
FEED_KEY = web.AppKey("feed", "SlaFeed")


class WindowStore:
    """The latest figures of each (pair, window), bounded per pair.

    Spark's Kafka sink is at-least-once and an update-mode query may emit a
    window more than once: a later record for the same window replaces the
    earlier one. Subscribers get every accepted window as it arrives.
    """

    def __init__(self, max_windows: int) -> None:
        self._max = max_windows
        self._pairs: dict[str, dict[int, SlaWindow]] = {}
        self._subscribers: set[asyncio.Queue[SlaWindow]] = set()

    def add(self, window: SlaWindow) -> None:
        """Store (or replace) one window and push it to every subscriber."""
        windows = self._pairs.setdefault(window.pair, {})
        windows[window.window_start] = window
        while len(windows) > self._max:
            del windows[min(windows)]
        for queue in self._subscribers:
            queue.put_nowait(window)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every stored window, per pair in window order, as JSON-ready dicts."""
        return [
            window.model_dump()
            for pair in sorted(self._pairs)
            for _, window in sorted(self._pairs[pair].items())
        ]

    @contextlib.contextmanager
    def subscribe(self) -> Any:
        """A queue receiving windows added from now on (for one SSE client)."""
        queue: asyncio.Queue[SlaWindow] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)


class SlaFeed:
    """Reads SlaWindow JSON from a Kafka topic into a :class:`WindowStore`.

    Starts ``history_s`` back in time on every partition (by timestamp), then
    follows the topic; waits for the topic when it does not exist yet.
    Records that are not SlaWindows are logged and skipped.
    """

    def __init__(self, kafka: KafkaSettings, topic: str, store: WindowStore,
                 history_s: float) -> None:
        self.topic = topic
        self._kafka = kafka
        self._store = store
        self._history_s = history_s
        self.records = 0
        self.skipped = 0
        self.ready = asyncio.Event()

    async def run(self) -> None:
        """Consume until cancelled."""
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self._kafka, "dashboard"), group_id=None,
            enable_auto_commit=False, auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            partitions = await self._partitions(consumer)
            consumer.assign(partitions)
            await self._seek_to_history(consumer, partitions)
            self.ready.set()
            log.info("dashboard following %s (%d partitions)", self.topic, len(partitions))
            async for record in consumer:
                self._accept(record.value)
        finally:
            await consumer.stop()

    async def _partitions(self, consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        # Ask for all topics first: a metadata request naming a missing topic
        # would make a broker with auto.create.topics.enable create it.
        admin = AIOKafkaAdminClient(**aiokafka_options(self._kafka, "dashboard"))
        await admin.start()
        try:
            warned = False
            while self.topic not in await consumer.topics():
                if not warned:
                    log.warning("topic %s does not exist yet; waiting for it", self.topic)
                    warned = True
                await asyncio.sleep(2.0)
            (described,) = await admin.describe_topics([self.topic])
            return [TopicPartition(self.topic, p["partition"])
                    for p in sorted(described["partitions"], key=lambda p: p["partition"])]
        finally:
            await admin.close()

    async def _seek_to_history(self, consumer: AIOKafkaConsumer,
                               partitions: list[TopicPartition]) -> None:
        since_ms = int((time.time() - self._history_s) * 1000)
        offsets = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            found = offsets.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])

    def _accept(self, value: bytes | None) -> None:
        self.records += 1
        try:
            window = SlaWindow.from_json(value or b"")
        except ValidationError as exc:
            self.skipped += 1
            log.warning("skipping a record that is not an SlaWindow: %s", exc)
            return
        self._store.add(window)


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def index(request: web.Request) -> web.FileResponse:
    """The dashboard page."""
    return web.FileResponse(STATIC_DIR / "index.html")


async def windows(request: web.Request) -> web.Response:
    """Every stored window as JSON (what a new SSE client gets first)."""
    return web.json_response(request.app[STORE_KEY].snapshot())


async def health(request: web.Request) -> web.Response:
    """Feed status: topic, whether it is following, records read and skipped."""
    feed = request.app[FEED_KEY]
    return web.json_response({
        "topic": feed.topic, "following": feed.ready.is_set(),
        "records": feed.records, "skipped": feed.skipped,
    })


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: one ``snapshot``, then a ``window`` event per new window."""
    store = request.app[STORE_KEY]
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no",
    })
    await response.prepare(request)
    with store.subscribe() as queue:
        await response.write(b"retry: 2000\n\n" + _sse("snapshot", store.snapshot()))
        while True:
            try:
                window = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            await response.write(_sse("window", window.model_dump()))


def create_app(kafka: KafkaSettings, topic: str, *, history_s: float = 3600.0,
               max_windows: int = 720) -> web.Application:
    """The dashboard app; its Kafka feed runs while the app runs."""
    app = web.Application()
    store = WindowStore(max_windows)
    feed = SlaFeed(kafka, topic, store, history_s)
    app[STORE_KEY] = store
    app[FEED_KEY] = feed

    async def feed_task(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(feed.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(feed_task)
    app.router.add_get("/", index)
    app.router.add_get("/events", events)
    app.router.add_get("/api/windows", windows)
    app.router.add_get("/healthz", health)
    app.router.add_static("/static/", STATIC_DIR)
    return app


def run(settings: Settings, *, host: str | None = None, port: int | None = None,
        topic: str | None = None) -> None:
    """Serve the dashboard until interrupted (``babelstream dashboard``)."""
    d = settings.dashboard
    app = create_app(
        settings.kafka, topic or d.topic or settings.sla.sink_topic,
        history_s=d.history_s, max_windows=d.max_windows,
    )
    web.run_app(app, host=host or d.host, port=port if port is not None else d.port,
                print=lambda line: print(line, file=sys.stderr, flush=True),
                handle_signals=True, shutdown_timeout=2.0)
