"""aiohttp server of the SLA dashboard: Kafka feeds, a window store, SSE to browsers.

The page's first paint already shows the windows the server has: ``/`` is
rendered with them (tables, and the snapshot as JSON for the charts), then
server-sent events keep it current. Late rows (``translate.sla.late``) are
counted per window; period summaries come from the job's Parquet history
(``/api/report``, the same merge as ``babelstream sla report``).

A *series* is a pair, a priority class and a window definition (its length:
runs of the job with other ``--window`` sizes write to the same topic), kept
in window order whatever order the records came in. With no window to show,
the page says why (:func:`empty_reason`).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from pydantic import BaseModel, ValidationError

from pipeline.contract.messages import LateResult, SlaWindow, now_ms
from pipeline.kafka.clients import aiokafka_options
from pipeline.settings import KafkaSettings, Settings, SlaSettings
from pipeline.sla.logic import JobRun

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
KEEPALIVE_S = 15.0

PERIODS_S = {"1h": 3600, "1d": 86_400, "30d": 30 * 86_400}

# (pair or "unsupported", priority, window length in ms)
SeriesKey = tuple[str, str, int]
# (pair, priority, window start, window end)
WindowKey = tuple[str, str, int, int]


class WindowStore:
    """The latest figures of each (series, window), bounded per series, and late-row counts.

    Spark's Kafka sink is at-least-once: a later record for the same window
    replaces the earlier one. Subscribers get every accepted window, and
    every late-row count that changed, as they arrive.
    """

    def __init__(self, max_windows: int) -> None:
        self._max = max_windows
        self._series: dict[SeriesKey, dict[int, SlaWindow]] = {}
        self._late: dict[WindowKey, set[str]] = {}
        self._subscribers: set[asyncio.Queue[tuple[str, dict[str, Any]]]] = set()

    def add(self, window: SlaWindow) -> None:
        """Store (or replace) one window and push it to every subscriber."""
        length = window.window_end - window.window_start
        windows = self._series.setdefault((window.pair, window.priority, length), {})
        windows[window.window_start] = window
        while len(windows) > self._max:
            del windows[min(windows)]
        self._publish("window", window.model_dump())

    def add_late(self, late: LateResult) -> None:
        """Count one late row (by request id, so a re-sent record counts once) of its window."""
        key = (late.pair, late.priority, late.window_start, late.window_end)
        ids = self._late.setdefault(key, set())
        if late.request_id not in ids:
            ids.add(late.request_id)
            self._publish("late", self._late_entry(key))

    def _late_entry(self, key: WindowKey) -> dict[str, Any]:
        pair, priority, start, end = key
        return {
            "pair": pair,
            "priority": priority,
            "window_start": start,
            "window_end": end,
            "late": len(self._late[key]),
        }

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        for queue in self._subscribers:
            queue.put_nowait((event, data))

    def snapshot(self) -> list[dict[str, Any]]:
        """Every stored window, series by series (pair, priority, window length) and in
        window order within each, as JSON-ready dicts."""
        return [
            window.model_dump()
            for series in sorted(self._series)
            for _, window in sorted(self._series[series].items())
        ]

    def late_snapshot(self) -> list[dict[str, Any]]:
        """Late-row counts per window, as JSON-ready dicts."""
        return [self._late_entry(key) for key in sorted(self._late)]

    @contextlib.contextmanager
    def subscribe(self) -> Any:
        """A queue receiving ``(event, data)`` from now on (for one SSE client)."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield queue
        finally:
            self._subscribers.discard(queue)


class SlaFeed:
    """Reads one Kafka topic of JSON messages into a :class:`WindowStore`.

    Starts ``history_s`` back in time on every partition (by timestamp), then
    follows the topic; waits for the topic when it does not exist yet.
    Records that are not ``model`` messages are logged and skipped.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        history_s: float,
        model: type[BaseModel],
        accept: Callable[[Any], None],
    ) -> None:
        self.topic = topic
        self._kafka = kafka
        self._history_s = history_s
        self._model = model
        self._accept_message = accept
        self.records = 0
        self.skipped = 0
        self.ready = asyncio.Event()

    async def run(self) -> None:
        """Consume until cancelled."""
        consumer = AIOKafkaConsumer(
            **aiokafka_options(self._kafka, "dashboard"),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",  # the SLA job writes in transactions
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
            return [
                TopicPartition(self.topic, p["partition"])
                for p in sorted(described["partitions"], key=lambda p: p["partition"])
            ]
        finally:
            await admin.close()

    async def _seek_to_history(
        self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]
    ) -> None:
        since_ms = int((time.time() - self._history_s) * 1000)
        offsets = await consumer.offsets_for_times({tp: since_ms for tp in partitions})
        ends = await consumer.end_offsets(partitions)
        for tp in partitions:
            found = offsets.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])

    def _accept(self, value: bytes | None) -> None:
        self.records += 1
        try:
            message = self._model.model_validate_json(value or b"")
        except ValidationError as exc:
            self.skipped += 1
            log.warning(
                "skipping a record on %s that is not a %s: %s",
                self.topic,
                self._model.__name__,
                exc,
            )
            return
        self._accept_message(message)


STORE_KEY = web.AppKey("store", WindowStore)
FEED_KEY = web.AppKey("feed", SlaFeed)
LATE_FEED_KEY = web.AppKey("late_feed", SlaFeed)
SLA_KEY = web.AppKey("sla", SlaSettings)
HISTORY_S_KEY = web.AppKey("history_s", float)


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _json_for_script(data: Any) -> str:
    # "</" would end the <script> element early
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def _window_order(window: dict[str, Any]) -> tuple[int, int]:
    """Tables list windows by end, then by length."""
    return window["window_end"], window["window_end"] - window["window_start"]


def render_index(store: WindowStore, template: str, empty: str) -> str:
    """The page with the store's windows in it: tables per pair and priority, the snapshot
    as JSON; with no window, ``empty`` (HTML) says why."""
    snapshot = store.snapshot()
    late = {
        (e["pair"], e["priority"], e["window_start"], e["window_end"]): e["late"]
        for e in store.late_snapshot()
    }
    sections = "".join(
        render_series(
            pair,
            priority,
            sorted(
                (w for w in snapshot if (w["pair"], w["priority"]) == (pair, priority)),
                key=_window_order,
            ),
            late,
        )
        for pair, priority in dict.fromkeys((w["pair"], w["priority"]) for w in snapshot)
    )
    initial = (
        f'<script id="initial-state" type="application/json">'
        f"{_json_for_script({'windows': snapshot, 'late': store.late_snapshot()})}"
        "</script>"
    )
    page = template.replace("<!--initial-state-->", initial)
    page = page.replace(EMPTY_MARKER, sections or f'<p id="empty">{empty}</p>')
    return page.replace(
        'data-window-count="0" data-pair-count="0"',
        f'data-window-count="{len(snapshot)}" '
        f'data-pair-count="{len({w["pair"] for w in snapshot})}"',
    )


EMPTY_MARKER = '<p id="empty">No SLA windows yet.</p>'
TABLE_ROWS = 20


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _span(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 120 else f"{seconds / 60:g} min"


def empty_reason(topic: str, topic_found: bool, sla: SlaSettings, history_s: float) -> str:
    """Why the page has no window to show and what to do (HTML), from the feed's state and
    what the SLA job was last started with (:class:`~pipeline.sla.logic.JobRun`, in its
    checkpoint)."""
    run = JobRun.read(sla.checkpoint_dir)
    since = f"the last {_span(history_s)} (BABELSTREAM_DASHBOARD__HISTORY_S)"
    start = "Start the SLA job: <code>babelstream sla</code>."
    if run is not None:
        started = f"SLA job last started {_utc(run.started_at)}"
        sinks = ",".join(run.sinks)
        if "kafka" not in run.sinks:
            return html.escape(
                f"No SLA windows: the {started} with --sinks {sinks}, which writes no window to "
                f"{topic}. Run it with the kafka sink: babelstream sla --sinks kafka,{sinks}."
            )
        if run.sink_topic != topic:
            return html.escape(
                f"No SLA windows on {topic}: the {started} writing to {run.sink_topic}. "
                f"Start the dashboard with --topic {run.sink_topic}."
            )
    if not topic_found:
        return f"No SLA windows yet: {html.escape(topic)} does not exist yet. {start}"
    if run is None:
        return f"No SLA windows on {html.escape(topic)} in {since}. {start}"
    return html.escape(
        f"No SLA windows on {topic} in {since}. The {started} with --sinks {sinks}: it writes "
        "a window once the watermark passes the window's end. Is it running (babelstream status)?"
    )


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def render_series(
    pair: str, priority: str, windows: list[dict[str, Any]], late: dict[WindowKey, int]
) -> str:
    """One pair and priority's section as the page script builds it (tables filled, every
    window definition in one table; charts come later)."""
    rows = []
    for w in reversed(windows[-TABLE_ROWS:]):
        missed = ",".join(sorted(name for name, ok in w["met"].items() if not ok)) or "-"
        cells = [
            time.strftime("%H:%M:%S", time.gmtime(w["window_end"] / 1000)),
            _span((w["window_end"] - w["window_start"]) / 1000),
            w["count"],
            f"{w['p50_ms']:.0f}",
            f"{w['p95_ms']:.0f}",
            f"{w['p99_ms']:.0f}",
            _pct(w["timeout_ratio"]),
            _pct(w["error_ratio"]),
            _pct(w["cache_hit_ratio"]),
            w["duplicates"],
            late.get((pair, priority, w["window_start"], w["window_end"]), 0),
            missed,
            "final",
        ]
        rows.append(
            f'<tr data-window-start="{w["window_start"]}" data-count="{w["count"]}" '
            f'data-p95="{w["p95_ms"]}" data-p99="{w["p99_ms"]}">'
            + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )
    section_id = f"pair-{pair}" if priority == "interactive" else f"bulk-{pair}"
    title = pair.replace("_", " → ") + ("" if priority == "interactive" else " (bulk)")
    return (
        f'<section class="pair" id="{html.escape(section_id)}" '
        f'data-pair="{html.escape(pair)}" data-priority="{priority}" '
        f'data-windows="{len(windows)}" data-server-rendered="true"'
        f"{'' if priority == 'interactive' else ' hidden'}>"
        f'<h2 class="pair-title">{html.escape(title)}</h2>'
        f'<table class="windows"><thead><tr>{TABLE_HEAD}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


TABLE_HEAD = "".join(
    f"<th>{name}</th>"
    for name in (
        "window end",
        "window",
        "count",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "timeout ratio",
        "error ratio",
        "cache-hit ratio",
        "duplicates",
        "late",
        "missed objectives",
        "final",
    )
)


async def index(request: web.Request) -> web.Response:
    """The dashboard page, with the windows the server already has."""
    template = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    app = request.app
    return web.Response(
        text=render_index(app[STORE_KEY], template, _empty(app)), content_type="text/html"
    )


def _empty(app: web.Application) -> str:
    feed = app[FEED_KEY]
    return empty_reason(feed.topic, feed.ready.is_set(), app[SLA_KEY], app[HISTORY_S_KEY])


async def windows(request: web.Request) -> web.Response:
    """Every stored window as JSON (what a new SSE client gets first)."""
    return web.json_response(request.app[STORE_KEY].snapshot())


async def health(request: web.Request) -> web.Response:
    """Feed status: topic, whether it is following, records read and skipped, and with no
    window to show, why (as the page says it)."""
    app = request.app
    feed, late = app[FEED_KEY], app[LATE_FEED_KEY]
    return web.json_response(
        {
            "topic": feed.topic,
            "following": feed.ready.is_set(),
            "records": feed.records,
            "skipped": feed.skipped,
            "late_topic": late.topic,
            "late_records": late.records,
            "empty_reason": None if app[STORE_KEY].snapshot() else _empty(app),
        }
    )


async def report(request: web.Request) -> web.Response:
    """A period summary of one series from the Parquet history (``sla report``'s merge).

    Query: ``pair``, ``priority`` (interactive), and either ``period`` (1h, 1d,
    30d: ending now) or ``from``/``to`` in epoch ms.
    """
    from pipeline.sla.history import period_report

    query = request.query
    try:
        if "period" in query:
            to_ms = now_ms()
            from_ms = to_ms - PERIODS_S[query["period"]] * 1000
        else:
            from_ms, to_ms = int(query["from"]), int(query["to"])
        pair, priority = query["pair"], query.get("priority", "interactive")
    except (KeyError, ValueError) as exc:
        raise web.HTTPBadRequest(
            text=f"expected pair and period ({', '.join(PERIODS_S)}) or from/to in epoch ms: {exc}"
        ) from exc
    result = await asyncio.to_thread(
        period_report, request.app[SLA_KEY], pair, priority, from_ms, to_ms
    )
    return web.json_response(result.to_dict())


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``snapshot`` and ``late-snapshot``, then ``window`` / ``late``."""
    store = request.app[STORE_KEY]
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    with store.subscribe() as queue:
        try:
            await response.write(
                b"retry: 2000\n\n"
                + _sse("snapshot", store.snapshot())
                + _sse("late-snapshot", store.late_snapshot())
            )
            while True:
                try:
                    event, data = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                await response.write(_sse(event, data))
        except ConnectionResetError:
            # the browser closed the page or reloaded it: normal operation
            log.debug("event stream to %s closed by the client", request.remote)
    return response


def create_app(settings: Settings, topic: str | None = None) -> web.Application:
    """The dashboard app; its Kafka feeds (windows, late rows) run while the app runs."""
    d, sla = settings.dashboard, settings.sla
    app = web.Application()
    store = WindowStore(d.max_windows)
    feed = SlaFeed(
        settings.kafka, topic or d.topic or sla.sink_topic, d.history_s, SlaWindow, store.add
    )
    late_feed = SlaFeed(settings.kafka, sla.late_topic, d.history_s, LateResult, store.add_late)
    app[STORE_KEY] = store
    app[FEED_KEY] = feed
    app[LATE_FEED_KEY] = late_feed
    app[SLA_KEY] = sla
    app[HISTORY_S_KEY] = d.history_s

    async def feed_tasks(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(f.run()) for f in (feed, late_feed)]
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.cleanup_ctx.append(feed_tasks)
    app.router.add_get("/", index)
    app.router.add_get("/events", events)
    app.router.add_get("/api/windows", windows)
    app.router.add_get("/api/report", report)
    app.router.add_get("/healthz", health)
    app.router.add_static("/static/", STATIC_DIR)
    return app


def run(
    settings: Settings,
    *,
    host: str | None = None,
    port: int | None = None,
    topic: str | None = None,
) -> None:
    """Serve the dashboard until interrupted (``babelstream dashboard``)."""
    d = settings.dashboard
    app = create_app(settings, topic)
    web.run_app(
        app,
        host=host or d.host,
        port=port if port is not None else d.port,
        print=lambda line: print(line, file=sys.stderr, flush=True),
        handle_signals=True,
        shutdown_timeout=2.0,
    )
