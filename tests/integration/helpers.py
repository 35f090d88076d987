"""Reading topics from a known position, and Spark round trips, for integration tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from pipeline.bulk.plan import BatchPlan, plan_batch
from pipeline.bulk.readers import CorpusReader
from pipeline.kafka.clients import kafka_python_options, spark_kafka_options
from pipeline.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class TopicTail:
    """Remembers a topic's end offsets now; later reads everything produced after."""

    def __init__(self, kafka: KafkaSettings | str, topic: str) -> None:
        """``kafka``: the client settings (or just bootstrap servers, for a plaintext stack)."""
        self.topic = topic
        if isinstance(kafka, str):
            kafka = KafkaSettings(bootstrap_servers=kafka)
        self._consumer = KafkaConsumer(
            **kafka_python_options(kafka, "tests-tail"),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",  # the SLA job writes in transactions
        )
        partitions = self._consumer.partitions_for_topic(topic) or set()
        assert partitions, f"topic {topic} does not exist"
        self._tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer.assign(self._tps)
        self._consumer.seek_to_end(*self._tps)
        for tp in self._tps:
            self._consumer.position(tp)
        self.records: list[ConsumerRecord] = []

    def read_until(
        self, done: Callable[[list[ConsumerRecord]], bool], timeout_s: float = 120.0
    ) -> list[ConsumerRecord]:
        """Poll until ``done(records so far)`` or the timeout; returns all records read."""
        deadline = time.monotonic() + timeout_s
        while not done(self.records) and time.monotonic() < deadline:
            for batch in self._consumer.poll(timeout_ms=250).values():
                self.records.extend(batch)
        return self.records

    def drain(self, quiet_s: float = 2.0) -> list[ConsumerRecord]:
        """Read until nothing new arrives for ``quiet_s`` seconds."""
        last = time.monotonic()
        while time.monotonic() - last < quiet_s:
            batches = self._consumer.poll(timeout_ms=250)
            for batch in batches.values():
                self.records.extend(batch)
                last = time.monotonic()
        return self.records

    def close(self) -> None:
        self._consumer.close()


def plan_corpus(job_id: str, inputs: list[Path], max_segment_bytes: int) -> list[BatchPlan]:
    """Every batch plan of a corpus, as ``bulk run`` makes them (for expected request ids)."""
    return [
        plan_batch(job_id, batch, max_segment_bytes) for batch in CorpusReader(inputs).documents()
    ]


def spark_kafka_round_trip(
    spark: SparkSession, kafka: KafkaSettings, topic: str, sent: dict[str, str]
) -> dict[str, str]:
    """Write ``sent`` with Spark's Kafka sink, read ``topic`` back with its source (batch)."""
    options = spark_kafka_options(kafka)
    frame = spark.createDataFrame(list(sent.items()), "key string, value string")
    frame.write.format("kafka").options(**options).option("topic", topic).save()
    rows = (
        spark.read.format("kafka")
        .options(**options)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
        .collect()
    )
    return {row.key: row.value for row in rows}
