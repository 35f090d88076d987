"""The local stack: health, idempotent ``up``, topics, and every client we ship against it.

The client round trips are the proof that Kafka 3.9.x (pinned in
``StackSettings.kafka_version``) speaks the protocol versions kafka-python,
aiokafka (Faust's client), confluent-kafka and Spark's kafka-clients use.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from pipeline.engine.registry import registry_models
from pipeline.kafka.topics import topic_specs
from pipeline.stack import manager
from pipeline.stack.manager import Endpoints
from tests.integration.helpers import spark_kafka_round_trip

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

N = 20


def _messages(tag: str) -> dict[str, str]:
    return {f"key-{i}": f"{tag} value {i} ✓" for i in range(N)}


def test_status_healthy_with_versions(stack: Endpoints) -> None:
    statuses = {s.name: s for s in manager.status(stack.settings)}
    assert set(statuses) == {"kafka", "redis"}
    assert all(s.healthy for s in statuses.values()), statuses
    assert statuses["kafka"].version == stack.settings.stack.kafka_version
    assert statuses["redis"].version and statuses["redis"].version[0].isdigit()


def test_up_twice_changes_nothing(stack: Endpoints) -> None:
    before = {s.name: s.pid for s in manager.status(stack.settings)}
    lines: list[str] = []
    after = {s.name: s.pid for s in manager.up(stack.settings, lines.append)}
    assert after == before
    assert all(pid is not None for pid in after.values())
    assert any("kafka: already running" in line for line in lines), lines
    assert any("redis: already running" in line for line in lines), lines
    assert any("0 created" in line for line in lines), lines


def test_topics_have_configured_partitions(stack: Endpoints) -> None:
    from kafka import KafkaAdminClient

    from pipeline.kafka.topics import partition_counts

    models = registry_models(stack.settings.engine.registry)
    specs = {name: spec.partitions for name, spec in topic_specs(stack.settings, models).items()}
    # the work topics of every model of the registry
    assert "translate.work.babelstream-demo-enxa" in specs
    assert "translate.work-bulk.babelstream-demo-enxa" in specs
    admin = KafkaAdminClient(bootstrap_servers=stack.bootstrap_servers)
    try:
        assert partition_counts(admin, list(specs)) == specs
    finally:
        admin.close()
    assert specs["translate.requests"] == stack.settings.kafka.ingress_partitions > 1


def test_redis_ping(stack: Endpoints) -> None:
    from pipeline.storage.redis_client import redis_client

    client = redis_client(stack.settings.redis)
    key = f"test:{uuid.uuid4().hex}"
    client.set(key, "ok", ex=10)
    assert client.get(key) == b"ok"
    client.close()


def test_kafka_python_round_trip(stack: Endpoints, new_topic: Callable[..., str]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic, sent = new_topic(), _messages("kafka-python")
    producer = KafkaProducer(
        bootstrap_servers=stack.bootstrap_servers, acks="all", compression_type="gzip"
    )
    for key, value in sent.items():
        producer.send(topic, key=key.encode(), value=value.encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=stack.bootstrap_servers,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    got: dict[str, str] = {}
    for record in consumer:
        got[record.key.decode()] = record.value.decode()
        if len(got) == N:
            break
    consumer.commit()
    consumer.close()
    assert got == sent


def test_aiokafka_round_trip(stack: Endpoints, new_topic: Callable[..., str]) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, sent = new_topic(), _messages("aiokafka")

    async def run() -> dict[str, str]:
        producer = AIOKafkaProducer(
            bootstrap_servers=stack.bootstrap_servers, acks="all", enable_idempotence=True
        )
        await producer.start()
        try:
            for key, value in sent.items():
                await producer.send(topic, key=key.encode(), value=value.encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=stack.bootstrap_servers,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        got: dict[str, str] = {}
        try:
            async with asyncio.timeout(30):
                async for record in consumer:
                    got[record.key.decode()] = record.value.decode()
                    if len(got) == N:
                        break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == sent


def test_confluent_kafka_round_trip(stack: Endpoints, new_topic: Callable[..., str]) -> None:
    from confluent_kafka import Consumer, Producer

    topic, sent = new_topic(), _messages("confluent")
    producer = Producer(
        {"bootstrap.servers": stack.bootstrap_servers, "acks": "all", "enable.idempotence": True}
    )
    for key, value in sent.items():
        producer.produce(topic, key=key.encode(), value=value.encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": stack.bootstrap_servers,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: dict[str, str] = {}
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got[msg.key().decode()] = msg.value().decode()
        if len(got) == N:
            break
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == sent


def test_spark_kafka_round_trip(
    stack: Endpoints, spark: SparkSession, new_topic: Callable[..., str]
) -> None:
    """Spark writes with its Kafka sink and reads back with its Kafka source (batch)."""
    topic, sent = new_topic(), _messages("spark")
    assert spark_kafka_round_trip(spark, stack.settings.kafka, topic, sent) == sent
