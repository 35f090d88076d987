"""Kafka ends of a bulk job: publish segment requests, read the job's results.

Requests go straight to the model's ``translate.work-bulk.<model>`` keyed by
content digest (as the router would key them), so identical segments meet on
one partition and the ingress topic stays free for interactive traffic.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from pydantic import ValidationError

from pipeline.bulk import BulkError
from pipeline.client import ProducerOwner
from pipeline.contract.messages import TranslationResult
from pipeline.contract.pairs import RESULTS_TOPIC
from pipeline.kafka.check import kafka_python_client
from pipeline.settings import KafkaSettings

log = logging.getLogger(__name__)


class BulkPublisher(ProducerOwner):
    """Publishes (key, value) records to one topic; acks=all, idempotent."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        super().__init__(settings, "bulk", linger_ms=20)
        self._topic = topic

    def publish(self, records: Sequence[tuple[bytes, bytes]]) -> None:
        """Send and wait until the broker acknowledged every record."""
        futures = [self._producer.send(self._topic, key=k, value=v) for k, v in records]
        self._producer.flush()
        try:
            for future in futures:
                future.get(timeout=self._settings.request_timeout_ms / 1000)
        except KafkaError as exc:
            raise BulkError(f"publishing to {self._topic} failed: {exc}") from exc


class JobResults:
    """This job's results on the results topic, from its end at construction time."""

    def __init__(self, settings: KafkaSettings, job_id: str, topic: str = RESULTS_TOPIC) -> None:
        self._job_id = job_id
        self._marker = job_id.encode()
        self._consumer = kafka_python_client(
            KafkaConsumer,
            settings,
            "bulk-results",
            group_id=None,
            enable_auto_commit=False,
            max_poll_records=500,
        )
        partitions = self._consumer.partitions_for_topic(topic)
        if not partitions:
            self._consumer.close()
            raise BulkError(f"topic {topic!r} does not exist (is the stack up?)")
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        self._consumer.assign(tps)
        self._consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the lazy seek before anything is published
            self._consumer.position(tp)

    def __enter__(self) -> JobResults:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._consumer.close()

    def poll(self, timeout_ms: int) -> list[TranslationResult]:
        """Results of this job that arrived within ``timeout_ms``."""
        out: list[TranslationResult] = []
        for records in self._consumer.poll(timeout_ms=timeout_ms).values():
            for record in records:
                if record.value is None or self._marker not in record.value:
                    continue  # cheap pre-filter: not this job's result
                try:
                    result = TranslationResult.from_json(record.value)
                except ValidationError:
                    log.warning("skipping malformed result at offset %s", record.offset)
                    continue
                if result.job_id == self._job_id:
                    out.append(result)
        return out
