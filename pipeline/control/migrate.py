"""Moving what releases before 0.2 left in per-pair work topics to the models' work topics.

Releases before 0.2 routed each request to a topic of its pair
(``translate.requests.<pair>``, ``translate.bulk.<pair>``); workers now read
one topic per model (:mod:`pipeline.contract.pairs`). Records a group had not yet
consumed from the old topics when it was upgraded would wait there for good.
:func:`migrate` copies every record past the group's committed offset to the
work topic of the model serving its pair (same key, value and headers; the
broker acknowledges each), then commits the group's offsets to where it read
them, so running it twice copies nothing twice. Records of a pair no model
serves now are left where they are, and reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from pipeline.contract.pairs import (
    LEGACY_BULK_PREFIX,
    LEGACY_PAIR_PREFIX,
    Pair,
    bulk_work_topic,
    work_topic,
)
from pipeline.engine.registry import Registry
from pipeline.errors import ConfigError, ContractError
from pipeline.kafka.check import admin_client
from pipeline.kafka.clients import kafka_python_options
from pipeline.kafka.topics import ensure_topics, model_topic_specs
from pipeline.settings import Settings


@dataclass
class LegacyTopic:
    """One per-pair topic of an older release and where its records go now."""

    name: str
    pair: Pair
    bulk: bool
    # the model serving the pair now, and its work topic (None: no model serves it)
    model: str | None
    target: str | None
    waiting: int = 0
    copied: int = 0


@dataclass
class Migration:
    """What :func:`migrate` found and did."""

    group: str
    topics: list[LegacyTopic] = field(default_factory=list)

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.topics)

    @property
    def stranded(self) -> list[LegacyTopic]:
        """Topics with records waiting for a pair no model serves."""
        return [t for t in self.topics if t.target is None and t.waiting]


def legacy_topics(settings: Settings) -> list[LegacyTopic]:
    """The per-pair work topics on the cluster, each with its model's topic (if any)."""
    registry = Registry.load(settings.engine.registry)
    admin = admin_client(settings.kafka, "migrate")
    try:
        names = sorted(admin.list_topics())
    finally:
        admin.close()
    found = []
    for name in names:
        for prefix, bulk in ((LEGACY_PAIR_PREFIX, False), (LEGACY_BULK_PREFIX, True)):
            if not name.startswith(prefix):
                continue
            try:
                pair = Pair.parse(name.removeprefix(prefix))
            except ContractError:
                continue  # not a pair topic (e.g. a reply topic's prefix)
            model = registry.model_for(pair)
            if model is None:
                found.append(LegacyTopic(name, pair, bulk, None, None))
                continue
            target = (bulk_work_topic if bulk else work_topic)(model.model_id)
            found.append(LegacyTopic(name, pair, bulk, model.model_id, target))
    return found


def migrate(settings: Settings, group: str, *, dry_run: bool = False) -> Migration:
    """Copy what ``group`` has not consumed of every per-pair topic to its model's topic."""
    from pipeline.client import reliable_producer

    migration = Migration(group, legacy_topics(settings))
    if not migration.topics:
        return migration
    if not dry_run:
        _refuse_if_active(settings, group)
    consumer = KafkaConsumer(
        **kafka_python_options(settings.kafka, "migrate"),
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = None if dry_run else reliable_producer(settings.kafka, "migrate")
    try:
        for topic in migration.topics:
            if topic.model is not None and producer is not None:
                ensure_topics(settings.kafka, model_topic_specs(settings.kafka, topic.model))
            _move(consumer, producer, topic, settings.kafka.request_timeout_ms / 1000)
    finally:
        consumer.close(autocommit=False)
        if producer is not None:
            producer.close(timeout=settings.kafka.producer_close_timeout_s)
    return migration


def _refuse_if_active(settings: Settings, group: str) -> None:
    """ConfigError when ``group`` has members: it could not commit past what was copied."""
    admin = admin_client(settings.kafka, "migrate")
    try:
        members = admin.describe_groups([group]).get(group, {}).get("members", [])
    finally:
        admin.close()
    if members:
        raise ConfigError(
            f"group {group} has {len(members)} member(s) running; stop its workers (and wait "
            "for their session to time out) before migrating, then start the new ones"
        )


def _move(
    consumer: KafkaConsumer, producer: KafkaProducer | None, topic: LegacyTopic, timeout_s: float
) -> None:
    """Count (and, with a producer and a target, copy and commit) what waits in ``topic``."""
    partitions = sorted(consumer.partitions_for_topic(topic.name) or ())
    tps = [TopicPartition(topic.name, p) for p in partitions]
    if not tps:
        return
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    for tp in tps:
        committed = consumer.committed(tp)
        start = committed if committed is not None else consumer.beginning_offsets([tp])[tp]
        consumer.seek(tp, start)
        topic.waiting += max(0, ends[tp] - start)
    if producer is None or topic.target is None or not topic.waiting:
        return
    futures = []
    for record in _records_until(consumer, ends):
        futures.append(
            producer.send(
                topic.target, key=record.key, value=record.value, headers=list(record.headers)
            )
        )
    producer.flush()
    for future in futures:
        future.get(timeout=timeout_s)
    topic.copied = len(futures)
    consumer.commit({tp: OffsetAndMetadata(ends[tp], "", -1) for tp in tps})


def _records_until(consumer: KafkaConsumer, ends: dict[TopicPartition, int]) -> Iterator[Any]:
    """Every record up to ``ends`` of the assigned partitions."""
    remaining = {tp for tp, end in ends.items() if consumer.position(tp) < end}
    while remaining:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for record in records:
                if record.offset < ends[tp]:
                    yield record
            if consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
