"""What runs beside the agents: rebalance hooks, commits, pages, loops.

The offset book's commit task, SLA ticks, the adaptive shapers' SLA feed,
the readiness and stats pages, and the periodic loops (stall checks, metric
samples, the group check) that run for as long as the app runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import faust
from faust.types import TP as FaustTP

from pipeline.contract.messages import SlaWindow
from pipeline.errors import EXIT_TEMPFAIL
from pipeline.kafka.groups import AssignmentCheck
from pipeline.kafka.records import Outgoing
from pipeline.observability import metrics
from pipeline.sla.dashboard.server import SlaFeed
from pipeline.sla.ticks import TickSource
from pipeline.steps.base import TransientError
from workers.faust_adapter import (
    coordination_failure,
)
from workers.shell import ServedModel, WorkerShell

log = logging.getLogger(__name__)


def add_lifecycle(app: faust.App, shell: WorkerShell, served: Sequence[ServedModel]) -> None:
    """Rebalance hooks, the commit task, ticks, the SLA feed, pages and periodic loops."""
    _add_rebalance_hooks(app, shell)
    _add_commit_task(app, shell)
    _add_ticks(app, shell, served)
    _add_sla_feed(app, shell)
    _add_pages(app, shell)
    _add_loops(app, shell)


def _add_rebalance_hooks(app: faust.App, shell: WorkerShell) -> None:
    """A revocation commits what is done; an assignment starts a new epoch of the book."""

    async def on_revoked(_app: Any, revoked: set[FaustTP], **_: Any) -> None:
        await shell.offsets.on_revoked()

    async def on_assigned(_app: Any, assigned: set[FaustTP], **_: Any) -> None:
        shell.offsets.on_assigned()
        shell.unassigned = None  # checked again before the worker says it is ready
        shell.lease.confirm()
        shell.lease.watch(app)
        if not shell.joined:
            shell.joined = True
            log.info(
                "worker %s joined group %s: %d partitions assigned",
                shell.ctx.worker_name,
                app.conf.id,
                len(assigned),
            )

    # Faust's signals pass the sender, the partitions and the signal itself
    app.on_partitions_revoked.connect(on_revoked)  # type: ignore[arg-type]
    app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]


def _add_commit_task(app: faust.App, shell: WorkerShell) -> None:
    @app.task
    async def commit_offsets() -> None:
        try:
            await shell.offsets.run()
        finally:  # the app stops by cancelling its tasks
            shell.offsets.close()


def _add_ticks(app: faust.App, shell: WorkerShell, served: Sequence[ServedModel]) -> None:
    """Heartbeats, so the SLA job closes quiet pairs' windows (never on translate.results)."""
    interval_s = shell.ctx.settings.worker.tick_interval_s
    if not served or interval_s <= 0:
        return
    ticks = TickSource(served[0].model.any_entry().pair.id, shell.ctx.worker_name)

    @app.timer(interval=interval_s)
    async def publish_ticks() -> None:
        with contextlib.suppress(TransientError):  # a missed tick is made up by the next
            topic, key, value = ticks.record()
            await shell.producer.send_all([Outgoing(topic, key, value, [], "tick")])


def _add_sla_feed(app: faust.App, shell: WorkerShell) -> None:
    """The adaptive controllers' outer loop: the SLA job's windows of their pairs."""
    adaptive = [shaper for shaper in shell.shapers.values() if shaper.controller]
    if not adaptive:
        return
    settings = shell.ctx.settings

    def to_shapers(window: SlaWindow) -> None:
        for shaper in adaptive:
            shaper.add(window)

    @app.task
    async def follow_sla_windows() -> None:
        await SlaFeed(settings.kafka, settings.sla.sink_topic, 0.0, SlaWindow, to_shapers).run()


def _add_pages(app: faust.App, shell: WorkerShell) -> None:
    """The ready announcement, and the readiness and stats pages."""

    @app.task
    async def announce_ready() -> None:
        while not shell.readiness()[0]:
            await asyncio.sleep(0.2)
        details = shell.readiness()[1]
        log.info(
            "ready: worker %s (group %s) serving %s",
            shell.ctx.worker_name,
            app.conf.id,
            "; ".join(f"{t} {p}" for t, p in details["assigned"].items())
            or "no partitions yet (more workers than partitions)",
        )

    @app.page("/babelstream/ready")
    async def ready_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        ready, details = shell.readiness()
        return web.json(details, status=200 if ready else 503)

    @app.page("/babelstream/stats")
    async def stats_page(web: faust.web.View, request: faust.web.Request) -> faust.web.Response:
        return web.json(
            {
                **shell.ctx.stats.snapshot(),
                "seeks": shell.offsets.seeks,
                "replays_dropped": shell.offsets.replays_dropped,
            }
        )


def _add_loops(app: faust.App, shell: WorkerShell) -> None:
    """Stall checks, metric samples and the group check, for as long as the app runs.

    Loops, not timers: a round that runs long (a loaded machine, a slow broker)
    delays the next one instead of overlapping it (and filling the log with
    mode's warnings).
    """
    ctx = shell.ctx
    cache_errors = metrics.TotalTracker(metrics.CACHE_ERRORS)
    cache_corrupt = metrics.TotalTracker(metrics.CACHE_CORRUPT)

    async def check_stalls() -> None:
        if shell.readiness()[0]:
            await shell.offsets.check_stalls(shell.input_partitions(), idle=shell.idle)

    async def sample_metrics() -> None:
        metrics.set_worker_ready(shell.readiness()[0])
        for name, runner in shell.runners.items():
            metrics.set_batch_failing(name, runner.health.failing_for_s())
        if ctx.cache.l2 is not None:
            cache_errors.update(ctx.cache.l2.errors)
            cache_corrupt.update(ctx.cache.l2.corrupt)
        await _sample_lag(app, shell)

    assignment = AssignmentCheck(ctx.settings.kafka, app.conf.id)

    async def check_group() -> None:
        failure = coordination_failure(app)
        if failure is not None and not shell.draining:
            log.critical(
                "group coordination ended (%s: %s); exiting so a restarted worker joins again",
                type(failure).__name__,
                failure,
            )
            shell.exit_code = EXIT_TEMPFAIL
            shell.request_stop()
            return
        if shell.joined and shell.subscription:
            shell.unassigned = await asyncio.to_thread(assignment.unassigned, shell.subscription)

    _every(app, shell.offsets.reseek_s, check_stalls)
    _every(app, ctx.settings.observability.sample_interval_s, sample_metrics)
    # soon after an assignment (readiness waits for it), then at the configured pace
    group_check_s = ctx.settings.worker.group_check_s
    _every(
        app,
        lambda: min(0.5, group_check_s) if shell.unassigned is None else group_check_s,
        check_group,
    )


def _every(
    app: faust.App, seconds: float | Callable[[], float], work: Callable[[], Awaitable[None]]
) -> None:
    """Run ``work`` every ``seconds`` (a number, or read before each round) for as long as
    the app runs; a round that fails is logged (once per kind of error) and the next one
    runs as usual."""
    failed: set[str] = set()

    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds() if callable(seconds) else seconds)
            try:
                await work()
            except Exception as exc:
                kind = type(exc).__name__
                if kind not in failed:
                    failed.add(kind)
                    log.warning("%s failed (%s: %s); trying again", work.__name__, kind, exc)

    loop.__name__ = loop.__qualname__ = work.__name__
    app.task(loop)


async def _sample_lag(app: faust.App, shell: WorkerShell) -> None:
    """Committed-offset lag (log end - committed) per assigned input partition."""
    try:
        inputs = shell.input_partitions()
        if not inputs:
            return
        ends = await app.consumer.highwaters(*(FaustTP(*tp) for tp in inputs))
        committed = await asyncio.to_thread(shell.offsets.committed_offsets, inputs)
        lag = {
            tp: ends[FaustTP(*tp)] - committed.get(tp, 0) for tp in inputs if FaustTP(*tp) in ends
        }
        metrics.set_committed_lag(
            app.conf.id, {(tp.topic, tp.partition): n for tp, n in lag.items()}
        )
        for topic, shaper in shell.shapers.items():
            shaper.lag(sum(n for tp, n in lag.items() if tp.topic == topic))
    except Exception as exc:  # a rebalance in progress; sample again next time
        log.debug("lag sample failed: %s", exc)
