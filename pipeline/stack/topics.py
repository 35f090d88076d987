"""The design's topics: their partition counts and configs, created idempotently.

Replication factor and ``min.insync.replicas`` come from :class:`KafkaSettings`
(1 / 1 on a single node, 3 / 2 on a cluster), never from literals. The local
stack (``babelstream up``) and the worker (before it consumes) both go
through :func:`ensure_topics`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.kafka_clients import admin_client
from pipeline.pairs import (
    CANCEL_TOPIC,
    DLQ_REPLAYED_TOPIC,
    DLQ_TOPIC,
    QUARANTINE_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    SLA_LATE_TOPIC,
    SLA_TOPIC,
    TICKS_TOPIC,
    bulk_work_topic,
    work_topic,
)
from pipeline.settings import KafkaSettings, Settings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient


@dataclass(frozen=True)
class TopicSpec:
    """How one topic is created: its partitions and topic-level configs."""

    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class EnsureReport:
    """What :func:`ensure_topics` found and did."""

    created: list[str]
    # existing topics whose partition count differs from the spec (left as they are)
    mismatched: dict[str, tuple[int, int]]


def topic_specs(settings: Settings) -> dict[str, TopicSpec]:
    """Every topic ``babelstream up`` creates."""
    kafka = settings.kafka
    specs = {
        REQUESTS_TOPIC: TopicSpec(kafka.ingress_partitions),
        RESULTS_TOPIC: TopicSpec(kafka.results_partitions),
        DLQ_TOPIC: TopicSpec(kafka.dlq_partitions),
        SLA_TOPIC: TopicSpec(kafka.sla_partitions),
        # A cancel matters only while a request it covers can be pending: at most the
        # longest deadline. Small segments let retention drop old cancels on time.
        CANCEL_TOPIC: TopicSpec(
            kafka.cancel_partitions,
            {
                "cleanup.policy": "compact,delete",
                "retention.ms": str(settings.limits.max_timeout_ms),
                "segment.ms": str(max(60_000, settings.limits.max_timeout_ms // 6)),
            },
        ),
        DLQ_REPLAYED_TOPIC: TopicSpec(
            kafka.replay_marker_partitions, {"cleanup.policy": "compact"}
        ),
        # an entry stays until an operator releases it (a tombstone)
        QUARANTINE_TOPIC: TopicSpec(kafka.quarantine_partitions, {"cleanup.policy": "compact"}),
        SLA_LATE_TOPIC: TopicSpec(kafka.sla_late_partitions),
        TICKS_TOPIC: TopicSpec(
            kafka.ticks_partitions, {"retention.ms": str(kafka.ticks_retention_ms)}
        ),
    }
    for model_id in registry_models(settings):
        specs.update(model_topic_specs(kafka, model_id))
    return specs


def registry_models(settings: Settings) -> list[str]:
    """The model ids of the engine registry (none when it cannot be read: the worker says
    why, and creates its models' topics itself)."""
    from pipeline.engine.registry import Registry
    from pipeline.errors import ConfigError

    try:
        return sorted(Registry.load(settings.engine.registry).models)
    except ConfigError:
        return []


def ensure_named(settings: Settings, *names: str) -> EnsureReport:
    """Create those of the design's topics ``names`` that are missing (clients call this
    before producing, so a topic is never auto-created without its configs)."""
    specs = topic_specs(settings)
    return ensure_topics(settings.kafka, {name: specs[name] for name in names})


def model_topic_specs(kafka: KafkaSettings, model_id: str) -> dict[str, TopicSpec]:
    """The interactive and bulk work topics of one model (every pair it serves)."""
    return {
        work_topic(model_id): TopicSpec(kafka.work_partitions),
        bulk_work_topic(model_id): TopicSpec(kafka.work_partitions),
    }


def ensure_topics(kafka: KafkaSettings, specs: Mapping[str, TopicSpec]) -> EnsureReport:
    """Create the missing topics with the configured replication; report mismatches."""
    from kafka.errors import TopicAlreadyExistsError

    admin = admin_client(kafka, "topics")
    try:
        existing = partition_counts(admin, list(specs))
        missing = {name: spec for name, spec in specs.items() if name not in existing}
        if missing:
            # Another process may create one in between: then it exists, which is the point.
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(
                    {
                        name: {
                            "num_partitions": spec.partitions,
                            "replication_factor": kafka.replication_factor,
                            "configs": _configs(kafka, spec),
                        }
                        for name, spec in missing.items()
                    },
                    wait_for_metadata=True,
                )
        drifted = {
            name: dict(spec.config)
            for name, spec in specs.items()
            if name in existing and spec.config
        }
        if drifted:
            _align_configs(admin, drifted)
    finally:
        admin.close()
    mismatched = {
        name: (count, specs[name].partitions)
        for name, count in existing.items()
        if count != specs[name].partitions
    }
    return EnsureReport(sorted(missing), mismatched)


def _align_configs(admin: KafkaAdminClient, configs: Mapping[str, dict[str, str]]) -> None:
    """Set the given topic-level configs on existing topics (created by an older version)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin.alter_configs(
        [
            ConfigResource(ConfigResourceType.TOPIC, name, configs=dict(values))
            for name, values in configs.items()
        ],
        raise_on_unknown=False,
    )


def _configs(kafka: KafkaSettings, spec: TopicSpec) -> dict[str, str]:
    return {"min.insync.replicas": str(kafka.min_insync_replicas), **spec.config}


def partition_counts(admin: KafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partition count of each of ``topics`` that exists.

    Describes all topics: asking for a missing topic by name would let the
    broker auto-create it (``auto.create.topics.enable``) with default partitions.
    """
    wanted = set(topics)
    counts: dict[str, int] = {}
    for topic in admin.describe_topics():
        if topic["name"] in wanted and not topic.get("error_code"):
            counts[topic["name"]] = len(topic["partitions"])
    return counts
