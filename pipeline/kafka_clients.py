"""Connection options for every Kafka client the project has, from one settings section.

kafka-python (client, bulk, benches, SLA sink), aiokafka (Faust worker,
dashboard) and Spark's Kafka source/sink all connect through these
functions, so bootstrap servers, client ids and (when enabled) security
are configured in exactly one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.settings import KafkaSettings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient


def kafka_python_options(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """Keyword arguments shared by every kafka-python client (producer, consumer, admin)."""
    return {
        "bootstrap_servers": kafka.bootstrap_servers.split(","),
        "client_id": f"{kafka.client_id}-{role}",
        "request_timeout_ms": kafka.request_timeout_ms,
    }


def aiokafka_options(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """Keyword arguments shared by every aiokafka client (consumer, producer, admin)."""
    return {
        "bootstrap_servers": kafka.bootstrap_servers.split(","),
        "client_id": f"{kafka.client_id}-{role}",
        "request_timeout_ms": kafka.request_timeout_ms,
    }


def spark_kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """``.option(...)`` pairs for Spark's Kafka source and sink (``kafka.``-prefixed)."""
    return {"kafka.bootstrap.servers": kafka.bootstrap_servers}


def admin_client(kafka: KafkaSettings, role: str = "admin") -> KafkaAdminClient:
    """A kafka-python admin client; the caller closes it."""
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**kafka_python_options(kafka, role))
