"""The design's topics: their partition counts and configs, created idempotently.

Replication factor and ``min.insync.replicas`` come from :class:`KafkaSettings`
(1 / 1 on a single node, 3 / 2 on a cluster), never from literals. The local
stack (``babelstream up``) and the worker (before it consumes) both go
through :func:`ensure_topics`.

A topic keeps the replication it was created with, so creating one with less
than the cluster offers is refused (:func:`check_replication`): below the
brokers' ``default.replication.factor`` or ``min.insync.replicas`` (the
operator's choice) is a settings mistake, e.g. a worker started on a
3-broker cluster without the cluster's settings; below the broker count
alone (a cluster whose default is Kafka's own 1) is honoured with a warning.
``babelstream status`` lists project topics below what the cluster offers
(:func:`under_replicated`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.contract.pairs import (
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
from pipeline.errors import ConfigError
from pipeline.kafka.check import admin_client
from pipeline.settings import KafkaSettings, Settings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

log = logging.getLogger(__name__)

# topics of this project: translate.* and the Faust apps' own (changelogs, assignor), whose
# app ids all start with "babelstream"
PROJECT_TOPIC_PREFIXES = ("translate.", "babelstream")


class ReplicationBelowCluster(ConfigError):
    """The settings would create topics with less replication than the cluster offers."""


@dataclass(frozen=True)
class ClusterReplication:
    """What a cluster offers new topics: its brokers and their defaults."""

    brokers: int
    default_replication_factor: int
    min_insync_replicas: int

    @property
    def replication_factor(self) -> int:
        """The brokers' default, at most one replica per broker."""
        return min(self.brokers, self.default_replication_factor)

    def describe(self) -> str:
        return (
            f"{self.brokers} broker{'s' * (self.brokers != 1)} with default.replication.factor "
            f"{self.default_replication_factor} and min.insync.replicas {self.min_insync_replicas}"
        )


class BrokerConfigsWithheld(Exception):
    """The brokers do not show this client their configs (a tenant's user may not read
    them)."""


def cluster_replication(admin: KafkaAdminClient) -> ClusterReplication:
    """The cluster's broker count and one broker's replication defaults.

    Raises: BrokerConfigsWithheld where this client may not describe the brokers' configs.
    """
    from kafka.admin import ConfigResource, ConfigResourceType

    brokers = admin.describe_cluster()["brokers"]
    broker_id = str(brokers[0]["broker_id"])
    wanted = {"default.replication.factor": None, "min.insync.replicas": None}
    configs = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, broker_id, configs=wanted)],
        config_filter="all",
    )["broker"][broker_id]
    if not wanted.keys() <= configs.keys():
        raise BrokerConfigsWithheld(f"broker {broker_id} shows no replication defaults")
    return ClusterReplication(
        brokers=len(brokers),
        default_replication_factor=int(configs["default.replication.factor"]["value"]),
        min_insync_replicas=int(configs["min.insync.replicas"]["value"]),
    )


def check_replication(kafka: KafkaSettings, cluster: ClusterReplication) -> None:
    """Refuse settings below the brokers' replication defaults; warn below the cluster size."""
    offered = cluster.replication_factor
    if (
        kafka.replication_factor < offered
        or kafka.min_insync_replicas < cluster.min_insync_replicas
    ):
        raise ReplicationBelowCluster(
            f"the cluster at {kafka.bootstrap_servers} has {cluster.describe()}, but "
            f"kafka.replication_factor is {kafka.replication_factor} and "
            f"kafka.min_insync_replicas {kafka.min_insync_replicas}: topics created with "
            "them would keep less replication than the cluster offers for good; set "
            f"BABELSTREAM_KAFKA__REPLICATION_FACTOR={offered} and "
            f"BABELSTREAM_KAFKA__MIN_INSYNC_REPLICAS={cluster.min_insync_replicas} "
            "(the cluster's client settings)"
        )
    if kafka.replication_factor < cluster.brokers:
        log.warning(
            "creating topics with %d replica on a %d-broker cluster (its "
            "default.replication.factor is %d): they lose partitions with a broker; "
            "set BABELSTREAM_KAFKA__REPLICATION_FACTOR up to %d to survive one",
            kafka.replication_factor,
            cluster.brokers,
            cluster.default_replication_factor,
            cluster.brokers,
        )


def is_project_topic(name: str) -> bool:
    """Whether ``name`` is one of this project's topics."""
    return name.startswith(PROJECT_TOPIC_PREFIXES)


def under_replicated(
    described: Iterable[Mapping[str, Any]], cluster: ClusterReplication
) -> dict[str, str]:
    """Project topic -> how it falls short: fewer replicas than the cluster offers, or a
    partition in sync on fewer replicas than it has (``describe_topics`` entries)."""
    found: dict[str, str] = {}
    offered = cluster.replication_factor
    for topic in described:
        name = str(topic["name"])
        if topic.get("error_code") or not is_project_topic(name):
            continue
        partitions = list(topic["partitions"])
        replicas = min((len(p["replica_nodes"]) for p in partitions), default=0)
        if partitions and replicas < offered:
            found[name] = f"{replicas} replica{'' if replicas == 1 else 's'} of {offered}"
            continue
        behind = [p for p in partitions if len(p["isr_nodes"]) < len(p["replica_nodes"])]
        if behind:
            which = ", ".join(str(p["partition_index"]) for p in behind)
            first = behind[0]
            found[name] = (
                f"partition{'s' if len(behind) > 1 else ''} {which} in sync on "
                f"{len(first['isr_nodes'])} of {len(first['replica_nodes'])} replicas"
            )
    return found


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


def topic_specs(settings: Settings, models: Iterable[str] = ()) -> dict[str, TopicSpec]:
    """The design's topics, with the work topics of ``models`` (``babelstream up`` gives the
    models of the registry: :func:`pipeline.engine.registry.registry_models`)."""
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
    for model_id in models:
        specs.update(model_topic_specs(kafka, model_id))
    return specs


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
            try:
                check_replication(kafka, cluster_replication(admin))
            except BrokerConfigsWithheld:
                # a tenant making its reply topic: the brokers still refuse a replication
                # factor over the cluster's size
                log.debug("creating %s without the replication check", ", ".join(missing))
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
