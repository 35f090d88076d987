"""The Faust application: a router agent plus translation agents per served model.

Faust is the shell: it runs the consumer group, takes micro-batches and serves
the web pages. This module composes the app: each agent's steps
(``pipeline/steps/``: :func:`translation_steps`, :func:`routing_steps`), its
way of consuming (:mod:`workers.agents`), the :class:`~workers.shell.WorkerShell`
every batch goes through (:mod:`workers.shell`), and what runs beside the
agents (:mod:`workers.lifecycle`). Faust's own acking is off for the topics
we consume: offsets are committed by the shell's offset book.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

import faust

from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, bulk_work_topic, work_topic
from pipeline.control.fairness import lone_round_s
from pipeline.control.priority import BULK, INTERACTIVE
from pipeline.detect import Detection
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.capabilities import cost_of
from pipeline.engine.shaping import BatchShaper
from pipeline.kafka.clients import faust_app_options
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.observability import metrics
from pipeline.routing import Router
from pipeline.steps.base import Batch
from pipeline.steps.batch_runner import BatchRunner, RetryPolicy
from pipeline.steps.chains import routing_steps, translation_steps
from pipeline.steps.isolation import canary_record
from pipeline.steps.publish import Producer
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.translate import EngineRunner
from workers.agents import fair_agent, plain_agent
from workers.control import Controls, TopicLister
from workers.dedup_table import FaustDedupWindow
from workers.faust_adapter import (
    use_idempotent_producer,
)
from workers.lifecycle import add_lifecycle
from workers.offset_keeper import OffsetKeeper
from workers.producer import FaustProducer
from workers.shell import ServedModel, WorkerContext, WorkerShell
from workers.tenant_ingress import TenantIngressGate

log = logging.getLogger(__name__)


def create_app(
    ctx: WorkerContext,
    served: Sequence[ServedModel],
    deployment: Callable[[Pair], str | None],
    detect: Callable[[str, str], Detection] | None = None,
    *,
    app_id: str = "babelstream",
    with_router: bool = True,
    instance_id: str | None = None,
    web_port: int | None = None,
) -> tuple[faust.App, WorkerShell]:
    """Build the Faust app and its shell.

    ``deployment`` gives the model id serving a pair anywhere in the deployment
    (the router forwards to models that other worker groups serve), or None;
    ``detect`` the source language of a text towards a target (requests sent
    with ``source_lang: auto``); ``served`` are the models this process
    translates with.
    """
    s = ctx.settings
    w = s.worker
    datadir = w.data_dir / app_id / (instance_id or "dynamic")
    datadir.parent.mkdir(parents=True, exist_ok=True)  # Faust makes only the last level
    app = faust.App(
        app_id,
        **faust_app_options(s.kafka),  # brokers and, when secured, credentials
        store="memory://",
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=s.kafka.work_partitions,
        topic_replication_factor=s.kafka.replication_factor,
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        consumer_group_instance_id=instance_id,
        broker_session_timeout=w.session_timeout_s,
        broker_heartbeat_interval=w.session_timeout_s / 3,
        datadir=str(datadir),
        web_port=w.web_port if web_port is None else web_port,
        web_bind=w.web_host,
        web_host=w.web_host,
        web_enabled=True,
    )
    use_idempotent_producer(app)
    offsets = OffsetKeeper(app, s.kafka, app_id, w.commit_interval_s, w.log_probe_timeout_s)
    producer = FaustProducer(app, w.produce_timeout_s)
    shell = WorkerShell(app, ctx, offsets, producer)
    policy = RetryPolicy(w.retry_initial_s, w.retry_max_s, w.retry_budget_s)
    controls = Controls.from_settings(s)
    replies = controls.reply_copies

    def source(name: str) -> faust.TopicT:
        # acks off: offsets are committed by the shell's offset book, not by Faust
        shell.sources.add(name)
        shell.subscription.append(name)
        return app.topic(name, key_type=bytes, value_type=bytes, acks=False)

    if with_router:
        router = Router(
            deployment,
            s.limits,
            worker=ctx.worker_name,
            hint=f" in {s.engine.registry} (add a model that serves it: "
            "`babelstream models add argos --pair SRC_TGT`)",
            detect=detect,
        )
        probe_pair = next((m.model.any_entry().pair for m in served), Pair("en", "de"))
        runner = BatchRunner(
            routing_steps(
                router=router,
                limits=s.limits,
                quarantine=controls.quarantine,
                control_wait_s=w.control_ready_wait_s,
                producer=producer,
                totals=ctx.stats,
                replies=replies,
            ),
            functools.partial(Batch.of, model_id="", worker=ctx.worker_name),
            policy,
            limits=s.limits,
            canary=functools.partial(
                canary_record, REQUESTS_TOPIC, probe_pair, w.canary_for(probe_pair.source)
            ),
            quarantine=controls.quarantine,
            producer=producer,
            name="router",
        )
        shell.runners["router"] = runner

        # The ingress is one FIFO per pair too: a flood routed first come first served
        # would hold back everyone else's requests before they reach the work topics.
        route = (
            fair_agent(shell, runner, None, w.max_messages, REQUESTS_TOPIC)
            if s.tenants.fair_share
            else plain_agent(shell, runner, None, w.max_messages, w.max_wait_s)
        )
        app.agent(source(REQUESTS_TOPIC), name="router", concurrency=1)(route)
        if s.tenants.identity_from_topic:
            gate = TenantIngressGate(
                s,
                app_id,
                ctx.worker_name,
                ReplyTopicCheck(TopicLister(s.kafka), s.replies.listing_refresh_s),
            )
            app.task(gate.run)

    for model in served:
        _add_model_agents(app, shell, model, source, producer, policy, controls, replies)

    add_lifecycle(app, shell, served)
    _add_controls(app, controls)
    return app, shell


def _add_model_agents(
    app: faust.App,
    shell: WorkerShell,
    served: ServedModel,
    source: Callable[[str], faust.TopicT],
    producer: Producer,
    policy: RetryPolicy,
    controls: Controls,
    replies: ReplyCopies,
) -> None:
    """The interactive and bulk agents of one model: every pair it serves shares them."""
    ctx = shell.ctx
    s, w = ctx.settings, ctx.settings.worker
    model = served.model
    table = app.Table(
        f"dedup-{model.model_id}", default=dict, partitions=s.kafka.work_partitions
    ).tumbling(w.dedup_window_s, expires=2 * w.dedup_window_s)
    probe = model.any_entry().pair
    cost = cost_of(served.translator, probe)
    for priority, topic_name, budget in (
        (INTERACTIVE, work_topic(model.model_id), w.token_budget),
        (BULK, bulk_work_topic(model.model_id), w.bulk_token_budget),
    ):
        # the batch shape: static, or adaptive (interactive); bulk calls bounded in time
        shaper = BatchShaper(
            s,
            model.model_id,
            model.serves,
            cost,
            bulk=priority == BULK,
            replicas=ctx.gate.share(priority),
        )
        shell.shapers[topic_name] = shaper
        # One window adapter per agent: it binds the events of its batches in flight (same table).
        window = FaustDedupWindow(table, w.dedup_window_s)
        engine = EngineRunner(
            served.translator,
            TokenBudgetBatcher(budget),
            ctx.gate,
            priority,
            canary_text=w.canary_for,
            shaper=shaper,
            label=model.model_id,
            residency=ctx.residency,
        )
        steps = translation_steps(
            model=model.model_id,
            serves=model.serves,
            limits=s.limits,
            window=window,
            cache=ctx.cache,
            engine=engine,
            producer=producer,
            totals=ctx.stats,
            compute_type=served.compute_type,
            cancels=controls.cancels,
            quarantine=controls.quarantine,
            control_wait_s=w.control_ready_wait_s,
            quotas=controls.quotas,
            replies=replies,
            recent_translations=w.recent_translations,
            fidelity=ctx.fidelity,
        )
        runner = BatchRunner(
            steps,
            functools.partial(Batch.of, model_id=served.model_id, worker=ctx.worker_name),
            policy,
            limits=s.limits,
            canary=functools.partial(canary_record, topic_name, probe, w.canary_for(probe.source)),
            quarantine=controls.quarantine,
            producer=producer,
            name=topic_name,
        )
        shell.runners[topic_name] = runner
        # Take as much as the shape may ever ask for; the shell cuts it to the current size.
        take = s.batching.adaptive_max_messages if shaper.controller else shaper.knobs.max_messages
        size = lambda shaper=shaper: shaper.knobs.max_messages  # noqa: E731 (read at each cut)
        round_s = lone_round_s(s.tenants.max_round_s, cost, budget)
        agent = (
            fair_agent(
                shell,
                runner,
                window,
                take,
                topic_name,
                size,
                round_s,
                s.batching.sort_window,
                served.translator.count_tokens,
                priority,
            )
            if s.tenants.fair_share
            else plain_agent(shell, runner, window, take, w.max_wait_s, size, priority)
        )
        app.agent(source(topic_name), name=f"translate-{topic_name}", concurrency=1)(agent)


def _add_controls(app: faust.App, controls: Controls) -> None:
    """The control feed (cancels, quarantine), the quota counters' health, and the reply
    producer's pruning."""
    app.task(controls.feed.run)
    quota_errors = metrics.TotalTracker(metrics.QUOTA_ERRORS)

    @app.timer(interval=controls.sample_interval_s)
    async def sample_quota_errors() -> None:
        quota_errors.update(controls.quotas.errors)

    @app.timer(interval=controls.listing_refresh_s)
    async def prune_reply_producer() -> None:
        try:
            await controls.reply_producer.prune()
        except Exception as exc:  # a listing that failed: next time
            log.warning("could not list reply topics: %s", exc)
