"""Fail fast, in one line, when a service a command needs does not answer.

Kafka clients wait their whole request timeout (30 s by default) before
they give up on an absent broker, and then raise deep inside a library. A
command checks the service first with a plain TCP connection (a few
seconds at most) and raises :class:`~pipeline.errors.ServiceUnavailable`
naming what it tried and how to fix it; errors of the clients themselves
that still get through are translated by :func:`as_unavailable`.
"""

from __future__ import annotations

import os
import socket

from pipeline.errors import ServiceUnavailable
from pipeline.settings import KafkaSettings

_STACK_HINT = "start the local stack with `babelstream up`"
_SPARK_MASTER_PORT = 7077  # Spark standalone's default when spark://host has no port


def tcp_problem(host: str, port: int, timeout_s: float) -> str | None:
    """Why a TCP connection to ``host:port`` fails (``connection refused``), or None if it opens."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g}s"
    except OSError as exc:
        return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def split_address(address: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or a bare host) -> (host, port)."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not port.isdigit():
        return address.strip().strip("[]"), default_port
    return host.strip("[]"), int(port)


def kafka_unreachable(kafka: KafkaSettings, detail: str) -> ServiceUnavailable:
    """The one-line error for brokers that do not answer."""
    return ServiceUnavailable(
        f"Kafka is not reachable at {kafka.bootstrap_servers} ({detail}); {_STACK_HINT}, "
        "or set BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS to your brokers"
    )


def require_kafka(kafka: KafkaSettings) -> None:
    """Raise :class:`ServiceUnavailable` unless some bootstrap server accepts a connection,
    and :class:`~pipeline.kafka.check.KafkaRefused` when the first that does refuses this
    client's security settings (TLS or SASL where it wants none, or none where it wants one).

    Without the second check a client with the wrong settings retries for its whole
    bootstrap timeout, logging every failed connection, before it says why.
    """
    from pipeline.kafka.check import KafkaRefused, handshake_problem

    problems = []
    for address in kafka.bootstrap_servers.split(","):
        host, port = split_address(address, 9092)
        problem = tcp_problem(host, port, kafka.connect_timeout_s)
        if problem is None:
            refused = handshake_problem(kafka, host, port, kafka.connect_timeout_s)
            if refused is not None:
                raise KafkaRefused(f"Kafka refused this client: {refused}")
            return
        problems.append(problem)
    raise kafka_unreachable(kafka, ", ".join(sorted(set(problems))))


def require_spark_master(master: str, timeout_s: float) -> None:
    """Raise :class:`ServiceUnavailable` when a ``spark://`` master does not answer.

    ``local[...]`` needs no server; other cluster managers are left to Spark.
    """
    if not master.startswith("spark://"):
        return
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, port = split_address(address, _SPARK_MASTER_PORT)
        problem = tcp_problem(host, port, timeout_s)
        if problem is None:
            return
        problems.append(problem)
    raise ServiceUnavailable(
        f"the Spark master {master} is not reachable ({', '.join(sorted(set(problems)))}); "
        "start it, or run locally with --master 'local[2]'"
    )


def as_unavailable(exc: BaseException, kafka: KafkaSettings | None) -> ServiceUnavailable | None:
    """The one-line error for a client exception that means a service is not there, or None."""
    module = type(exc).__module__
    name = type(exc).__name__
    if kafka is not None and module.startswith(("kafka.", "aiokafka.")):
        detail = str(exc).removeprefix(f"{name}: ") or name
        if name == "KafkaConnectionError" or (
            name == "KafkaTimeoutError" and "bootstrap" in detail
        ):
            return kafka_unreachable(kafka, detail)
        if name == "KafkaTimeoutError":  # brokers answer, but not in time (metadata, acks)
            return ServiceUnavailable(
                f"Kafka at {kafka.bootstrap_servers} did not answer in time ({detail}); "
                "`babelstream status` shows its health"
            )
    if module.startswith("pyspark.") and "JAVA_GATEWAY_EXITED" in str(exc):
        java = os.environ.get("JAVA_HOME", "not set")
        return ServiceUnavailable(
            f"Spark could not start its JVM; is Java 17 installed (JAVA_HOME: {java})?"
        )
    return None
