"""Connection options for every Kafka client the project has, from one settings section.

kafka-python (client, bulk, benches, SLA sink), aiokafka (dashboard), Faust
(the worker: :func:`faust_app_options`) and Spark's Kafka source/sink all
connect through these functions, so bootstrap servers, client ids and
security (TLS, SASL/SCRAM) are configured in exactly one place. Secrets stay
``SecretStr`` in settings and are unwrapped only here, into the client's
own arguments.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pipeline.settings import KafkaSettings


def ssl_context(kafka: KafkaSettings) -> ssl.SSLContext:
    """A client TLS context: the configured CA, and the client certificate when set."""
    context = ssl.create_default_context(cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None)
    context.check_hostname = kafka.ssl_check_hostname
    if kafka.ssl_certfile is not None:
        context.load_cert_chain(
            str(kafka.ssl_certfile),
            str(kafka.ssl_keyfile) if kafka.ssl_keyfile else None,
            kafka.ssl_key_password.get_secret_value() if kafka.ssl_key_password else None,
        )
    return context


class _Unlogged(str):
    """A secret handed to a client library as the ``str`` it wants, with a masked repr.

    kafka-python logs its whole configuration at DEBUG ("Starting
    KafkaAdminClient with configuration: {...}"); the dict's repr then shows
    this instead of the password.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'**********'"


def _security_options(kafka: KafkaSettings) -> dict[str, Any]:
    """Security keyword arguments; kafka-python and aiokafka spell them the same way."""
    options: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.uses_tls:
        options["ssl_context"] = ssl_context(kafka)
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_password is not None  # checked by KafkaSettings
        options.update(
            sasl_mechanism=kafka.sasl_mechanism,
            sasl_plain_username=kafka.sasl_username,
            sasl_plain_password=_Unlogged(kafka.sasl_password.get_secret_value()),
        )
    return options


class _DemoteClientNoise(logging.Filter):
    """Logs kafka-python 3 emits at WARNING/ERROR in normal operation, demoted to DEBUG.

    * ``kafka.cluster`` "Metadata refresh: failed Cancelled": closing a client
      cancels its in-flight metadata request (seen in ~1 of 10 ``translate`` runs),
      or "... failed Transport closed for writes": the refresh went out on the
      connection the close had just shut (one CI run in ~20); a broker that goes
      away is still logged, by the connection's own errors;
    * ``kafka.net.transport`` "Error receiving network data" with an
      AttributeError on a transport already ``(closed)``: the same race at close;
    * ``kafka.net.selector`` "Task ... ran for 0.1xxs": its own event loop was
      slow (a loaded machine), a diagnostic for kafka-python's developers;
    * ``kafka.net.selector`` "Error closing coroutine for cancelled task" with
      ``ValueError: generator already executing``: closing a client cancels a
      task while its background thread is still stepping it (rare: one CI run in
      ~20); the client is going away and its replies were already read;
    * ``kafka.admin._groups`` "Unable to decode member_metadata": Faust's group
      metadata is not the plain consumer protocol (``pipeline.kafka.groups`` reads it).
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
                isinstance(a, Cancelled) or _closed_for_writes(a) for a in args
            )
        if record.name == "kafka.net.transport":
            error = record.exc_info[1] if record.exc_info else None
            return isinstance(error, AttributeError) and "(closed)" in record.getMessage()
        if record.name == "kafka.admin._groups":
            return str(record.msg).startswith("Unable to decode member_metadata")
        if record.name == "kafka.net.selector":
            error = record.exc_info[1] if record.exc_info else None
            closing_race = (
                record.msg == "Error closing coroutine for cancelled task"
                and isinstance(error, ValueError)
                and str(error) == "generator already executing"
            )
            return closing_race or "threshold). It is blocking" in str(record.msg)
        return False


def _closed_for_writes(error: object) -> bool:
    """kafka-python's transport refusing a send after its close (a RuntimeError)."""
    return isinstance(error, RuntimeError) and str(error) == "Transport closed for writes"


_NOISE = _DemoteClientNoise()


def quiet_client_noise() -> None:
    """Install :class:`_DemoteClientNoise` on kafka-python's loggers (idempotent)."""
    for name in (
        "kafka.cluster",
        "kafka.net.transport",
        "kafka.net.selector",
        "kafka.admin._groups",
    ):
        logger = logging.getLogger(name)
        if _NOISE not in logger.filters:
            logger.addFilter(_NOISE)


@contextmanager
def kafka_logs_silenced() -> Iterator[None]:
    """kafka-python's loggers at CRITICAL for a while (it logs each refused connection at
    ERROR; a probe or a drill provokes some), then back at their level."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def kafka_python_options(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """Keyword arguments shared by every kafka-python client (producer, consumer, admin)."""
    quiet_client_noise()
    return {
        "bootstrap_servers": kafka.bootstrap_servers.split(","),
        "client_id": f"{kafka.client_id}-{role}",
        "request_timeout_ms": kafka.request_timeout_ms,
        **_security_options(kafka),
    }


def aiokafka_options(kafka: KafkaSettings, role: str) -> dict[str, Any]:
    """Keyword arguments shared by every aiokafka client (consumer, producer, admin)."""
    return {
        "bootstrap_servers": kafka.bootstrap_servers.split(","),
        "client_id": f"{kafka.client_id}-{role}",
        "request_timeout_ms": kafka.request_timeout_ms,
        **_security_options(kafka),
    }


def faust_app_options(kafka: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments for ``faust.App(...)``: the broker URLs and, when secured, credentials.

    Faust hands ``broker_credentials`` to every aiokafka client it creates
    (consumers, producer, the admin client that creates changelog topics).
    """
    import faust

    options: dict[str, Any] = {
        "broker": [f"kafka://{address}" for address in kafka.bootstrap_servers.split(",")],
    }
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_password is not None  # checked by KafkaSettings
        options["broker_credentials"] = faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value(),
            ssl_context=ssl_context(kafka) if kafka.uses_tls else None,
            mechanism=kafka.sasl_mechanism,
        )
    elif kafka.security_protocol == "SSL":
        options["broker_credentials"] = faust.SSLCredentials(ssl_context(kafka))
    return options


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """``.option(...)`` pairs for Spark's Kafka source and sink (``kafka.``-prefixed).

    Trust and key stores are the same PEM files the Python clients use (Kafka
    clients read PEM since 2.7). The SASL password travels in
    ``sasl.jaas.config``, whose value Spark redacts in plans and logs
    (``spark.redaction.regex`` matches ``password``); py4j would log it with
    every JVM call at DEBUG, so its logger is kept at INFO from then on.
    """
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.security.protocol": kafka.security_protocol,
        "kafka.request.timeout.ms": str(kafka.request_timeout_ms),
    }
    if kafka.uses_tls:
        if kafka.ssl_cafile is not None:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(kafka.ssl_cafile)
        if not kafka.ssl_check_hostname:
            options["kafka.ssl.endpoint.identification.algorithm"] = ""
        if kafka.ssl_certfile is not None:
            if kafka.ssl_keyfile is not None:
                raise ValueError(
                    "Spark's Kafka client needs the client key and certificate "
                    "in one PEM file: put both in kafka.ssl_certfile"
                )
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.location"] = str(kafka.ssl_certfile)
            if kafka.ssl_key_password is not None:
                options["kafka.ssl.key.password"] = kafka.ssl_key_password.get_secret_value()
    if kafka.security_protocol.startswith("SASL_"):
        assert kafka.sasl_password is not None  # checked by KafkaSettings
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if kafka.sasl_mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        py4j = logging.getLogger("py4j")
        if py4j.getEffectiveLevel() < logging.INFO:
            py4j.setLevel(logging.INFO)
        options["kafka.sasl.mechanism"] = kafka.sasl_mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{module} required username={_jaas_quote(kafka.sasl_username or '')} "
            f"password={_jaas_quote(kafka.sasl_password.get_secret_value())};"
        )
    return options


def spark_kafka_source_options(kafka: KafkaSettings) -> dict[str, str]:
    """:func:`spark_kafka_options` for Spark's Kafka source, its consumers' fetch wait included.

    Spark's consumer pre-fetches past the records a task needs; at the end of
    the log that fetch parks on the broker for ``fetch.max.wait.ms``, and the
    task's next poll waits for it (apache/spark#41525 logs such a read: one
    record in 504 ms).
    """
    return spark_kafka_options(kafka) | {
        "kafka.fetch.max.wait.ms": str(kafka.spark_fetch_max_wait_ms)
    }
