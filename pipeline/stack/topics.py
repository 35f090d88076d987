"""The design's topics and their partition counts, created idempotently."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.pairs import (
    DLQ_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    SLA_TOPIC,
    Pair,
    bulk_topic,
    pair_topic,
)
from pipeline.settings import Settings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient


def topic_specs(settings: Settings) -> dict[str, int]:
    """Topic name -> partition count for everything ``babelstream up`` creates."""
    kafka = settings.kafka
    specs = {
        REQUESTS_TOPIC: kafka.ingress_partitions,
        RESULTS_TOPIC: kafka.results_partitions,
        DLQ_TOPIC: kafka.dlq_partitions,
        SLA_TOPIC: kafka.sla_partitions,
    }
    for pair_id in settings.stack.pairs:
        pair = Pair.parse(pair_id)
        specs[pair_topic(pair)] = kafka.pair_partitions
        specs[bulk_topic(pair)] = kafka.pair_partitions
    return specs


def ensure_topics(bootstrap_servers: str, specs: dict[str, int]) -> tuple[list[str], list[str]]:
    """Create the missing topics (replication 1).

    Returns (created, mismatched): the names created now, and existing topics
    whose partition count differs from ``specs`` (left as they are).
    """
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="babelstream-stack")
    try:
        existing = partition_counts(admin, list(specs))
        missing = {name: n for name, n in specs.items() if name not in existing}
        if missing:
            admin.create_topics(
                {name: {"num_partitions": n, "replication_factor": 1}
                 for name, n in missing.items()},
                wait_for_metadata=True,
            )
    finally:
        admin.close()
    mismatched = [name for name, n in existing.items() if n != specs[name]]
    return sorted(missing), mismatched


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
