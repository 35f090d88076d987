"""Before any agent consumes: the brokers answer, and every topic the worker needs exists.

A first start against a broker that has never seen the project used to race
Faust's own creation of the dedup tables' changelog topics (the table saw a
changelog with 0 partitions and every request of the first batches failed).
So the worker creates all of its topics itself, the changelogs with their
tables' partition counts and configs, and waits until a fresh metadata
request shows every partition before it starts Faust.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

import faust
from kafka.errors import KafkaError
from mode.utils.times import want_seconds
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

from pipeline.contract.pairs import (
    CANCEL_TOPIC,
    DLQ_TOPIC,
    QUARANTINE_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    TICKS_TOPIC,
)
from pipeline.errors import BabelStreamError, ServiceUnavailable
from pipeline.kafka.check import admin_client
from pipeline.kafka.reachability import kafka_unreachable, require_kafka
from pipeline.kafka.topics import TopicSpec, ensure_topics, model_topic_specs, topic_specs
from pipeline.settings import KafkaSettings, Settings

log = logging.getLogger(__name__)


class TopicsNotReady(BabelStreamError):
    """A topic the worker needs is missing or has the wrong partition count."""


def worker_topics(
    settings: Settings, models: Iterable[str], app: faust.App, with_router: bool
) -> dict[str, TopicSpec]:
    """Every topic this worker reads or writes, with how to create it."""
    kafka = settings.kafka
    every = topic_specs(settings)
    specs = {
        name: every[name] for name in (RESULTS_TOPIC, DLQ_TOPIC, TICKS_TOPIC, QUARANTINE_TOPIC)
    }
    if with_router:
        specs[REQUESTS_TOPIC] = TopicSpec(kafka.ingress_partitions)
    models = list(models)
    specs[CANCEL_TOPIC] = every[CANCEL_TOPIC]  # the control feed reads it
    for model_id in models:
        specs.update(model_topic_specs(kafka, model_id))
    for table in app.tables.values():
        topic = table.changelog_topic
        specs[topic.get_topic_name()] = TopicSpec(
            topic.partitions or kafka.work_partitions, changelog_config(topic)
        )
    return specs


def changelog_config(topic: faust.TopicT) -> dict[str, str]:
    """A table changelog's configs: Faust's cleanup policy and retention, plus segment time.

    Kafka deletes and compacts only closed segments, and by default a segment
    closes after 7 days or 1 GiB: the dedup window's changelog (retention two
    windows) would grow for days, and every worker start would replay all of it
    to recover the table. Rolling segments at half the retention keeps the
    changelog, and so recovery, to about two windows of entries.
    """
    policies = [
        name for name, on in (("compact", topic.compacting), ("delete", topic.deleting)) if on
    ]
    config = {"cleanup.policy": ",".join(policies)} if policies else {}
    if topic.retention:
        retention_ms = int(want_seconds(topic.retention) * 1000)
        config["retention.ms"] = str(retention_ms)
        config["segment.ms"] = str(max(60_000, retention_ms // 2))
    return config


def prepare(kafka: KafkaSettings, specs: Mapping[str, TopicSpec], wait_s: float) -> None:
    """Wait for the brokers, create missing topics, wait until all are visible; or raise."""
    retrying = Retrying(
        retry=retry_if_exception_type((KafkaError, ServiceUnavailable, TopicsNotReady)),
        wait=wait_exponential_jitter(multiplier=0.5, max=5.0),
        stop=stop_after_delay(wait_s),
        before_sleep=lambda state: log.warning(
            "waiting for Kafka at %s: %s",
            kafka.bootstrap_servers,
            state.outcome.exception() if state.outcome else "?",
        ),
        reraise=True,
    )
    began = time.monotonic()
    try:
        for attempt in retrying:
            with attempt:
                require_kafka(kafka)  # a quick TCP check before the slower clients
                report = ensure_topics(kafka, specs)
                _check_visible(kafka, specs)
    except KafkaError as exc:
        raise kafka_unreachable(kafka, f"{type(exc).__name__} after {wait_s:.0f}s") from exc
    if report.created:
        log.info("created topics %s", ", ".join(report.created))
    if report.mismatched:
        wrong = ", ".join(
            f"{n} has {a} partitions, needs {w}" for n, (a, w) in report.mismatched.items()
        )
        raise TopicsNotReady(f"topics with the wrong partition count: {wrong}")
    log.info("all %d topics ready after %.1fs", len(specs), time.monotonic() - began)


def _check_visible(kafka: KafkaSettings, specs: Mapping[str, TopicSpec]) -> None:
    # A fresh client, so the answer is the brokers' metadata, not a cached view;
    # every partition must have a leader, or the first produce would block on it.
    admin = admin_client(kafka, "bootstrap")
    try:
        described = {t["name"]: t for t in admin.describe_topics() if not t.get("error_code")}
    finally:
        admin.close()
    not_ready = sorted(
        name
        for name in specs
        if name not in described or any(p["leader_id"] < 0 for p in described[name]["partitions"])
    )
    if not_ready:
        raise TopicsNotReady(f"not yet in metadata with leaders: {', '.join(not_ready)}")
