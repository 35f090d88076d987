"""Connection options for every Kafka client the project has, from one settings section.

kafka-python (client, bulk, benches, SLA sink), aiokafka (Faust worker,
dashboard) and Spark's Kafka source/sink all connect through these
functions, so bootstrap servers, client ids and (when enabled) security
are configured in exactly one place.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pipeline.settings import KafkaSettings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient


class _DemoteClientNoise(logging.Filter):
    """Logs kafka-python 3 emits at WARNING/ERROR in normal operation, demoted to DEBUG.

    * ``kafka.cluster`` "Metadata refresh: failed Cancelled": closing a client
      cancels its in-flight metadata request (seen in ~1 of 10 ``translate`` runs);
    * ``kafka.net.transport`` "Error receiving network data" with an
      AttributeError on a transport already ``(closed)``: the same race at close;
    * ``kafka.net.selector`` "Task ... ran for 0.1xxs": its own event loop was
      slow (a loaded machine), a diagnostic for kafka-python's developers;
    * ``kafka.admin._groups`` "Unable to decode member_metadata": Faust's group
      metadata is not the plain consumer protocol (``pipeline.groups`` reads it).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if self._noise(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True

    @staticmethod
    def _noise(record: logging.LogRecord) -> bool:
        from kafka.errors import Cancelled

        if record.name == "kafka.cluster":
            args = record.args if isinstance(record.args, tuple) else ()
            return record.msg == "Metadata refresh: failed %s" and any(
                isinstance(a, Cancelled) for a in args)
        if record.name == "kafka.net.transport":
            error = record.exc_info[1] if record.exc_info else None
            return isinstance(error, AttributeError) and "(closed)" in record.getMessage()
        if record.name == "kafka.admin._groups":
            return str(record.msg).startswith("Unable to decode member_metadata")
        return record.name == "kafka.net.selector" and "threshold). It is blocking" in str(
            record.msg)


_NOISE = _DemoteClientNoise()


def quiet_client_noise() -> None:
    """Install :class:`_DemoteClientNoise` on kafka-python's loggers (idempotent)."""
    for name in ("kafka.cluster", "kafka.net.transport", "kafka.net.selector",
                 "kafka.admin._groups"):
        logger = logging.getLogger(name)
        if _NOISE not in logger.filters:
            logger.addFilter(_NOISE)


def kafka_python_options(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """Keyword arguments shared by every kafka-python client (producer, consumer, admin)."""
    quiet_client_noise()
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
