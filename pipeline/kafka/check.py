"""Why a Kafka client cannot connect, in one line.

kafka-python reports a refused SASL login or a TLS/plaintext mismatch only as
"Unable to bootstrap" after its timeout (the broker's authentication error
never reaches it), and logs every failed attempt meanwhile. :func:`connection_problem`
retraces the connection step by step against each bootstrap server — TCP, TLS,
then a real Kafka handshake with SASL through aiokafka, which surfaces the
broker's own error — and names the setting to fix. :func:`handshake_problem`
is the quick first check every command makes (``require_kafka``): one exchange
as the configured client, diagnosed only when it fails. :func:`kafka_python_client`
uses the diagnosis when a client fails to bootstrap.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.errors import ConfigError
from pipeline.kafka.clients import aiokafka_options, kafka_python_options, ssl_context
from pipeline.settings import KafkaSettings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

T = TypeVar("T")


class KafkaRefused(ConfigError):
    """The brokers refuse this client: unreachable, wrong protocol, untrusted, bad credentials."""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host, int(port)


# how a user of the local secure stack gets its client settings (README: Security)
SECURE_STACK_FIX = (
    "for the stack `babelstream up --secure` started, `source var/stack/settings.env` "
    "(or BABELSTREAM_CONFIG=var/stack/settings.toml)"
)


def _tls_problem(kafka: KafkaSettings, host: str, port: int, timeout_s: float) -> str | None:
    """Handshake as the client would (TLS on), or probe whether the port speaks TLS (TLS off)."""
    if kafka.uses_tls:
        context = ssl_context(kafka)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            pass
    except ssl.SSLCertVerificationError as exc:
        return (
            f"{host}:{port} presents a certificate this client does not trust "
            f"({exc.verify_message}): check kafka.ssl_cafile"
        )
    except (ssl.SSLError, OSError) as exc:
        if not kafka.uses_tls:
            return None  # no TLS there, as configured
        return (
            f"TLS handshake with {host}:{port} failed ({exc}): the listener may not "
            f"speak TLS; check kafka.security_protocol ({kafka.security_protocol})"
        )
    if not kafka.uses_tls:
        return (
            f"{host}:{port} speaks TLS but kafka.security_protocol is "
            f"{kafka.security_protocol}: use SASL_SSL or SSL (with kafka.ssl_cafile); "
            + SECURE_STACK_FIX
        )
    return None


async def _kafka_handshake(
    kafka: KafkaSettings, host: str, port: int, request: Any | None = None
) -> None:
    """aiokafka's connection handshake (TLS, ApiVersions, SASL), then ``request`` if given."""
    from aiokafka.conn import create_conn

    options = aiokafka_options(kafka, "check")
    del options["bootstrap_servers"]
    conn = await create_conn(host, port, **options)
    try:
        if request is not None:
            await conn.send(request)
    finally:
        conn.close()


def _handshake_problem(kafka: KafkaSettings, host: str, port: int, timeout_s: float) -> str | None:
    from aiokafka.errors import SaslAuthenticationFailed

    try:
        asyncio.run(asyncio.wait_for(_kafka_handshake(kafka, host, port), timeout_s))
    except SaslAuthenticationFailed as exc:
        return (
            f"{host}:{port} refused the SASL login of user {kafka.sasl_username!r} "
            f"({kafka.sasl_mechanism}): {exc.args[0] if exc.args else exc}; check "
            "kafka.sasl_username and kafka.sasl_password"
        )
    except (TimeoutError, OSError) as exc:
        return f"no Kafka handshake with {host}:{port} within {timeout_s:.0f}s ({exc!r})"
    except Exception as exc:  # aiokafka's own errors, each a reason worth showing
        reason = f"{type(exc).__name__}: {exc}"
        if kafka.security_protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            reason += " (does the listener expect TLS? kafka.security_protocol)"
        elif kafka.security_protocol == "SSL" and kafka.ssl_certfile is None:
            reason += " (does the listener want a client certificate? kafka.ssl_certfile)"
        return f"{host}:{port} closed the Kafka handshake: {reason}"
    return None


def _address_problem(kafka: KafkaSettings, host: str, port: int, timeout_s: float) -> str | None:
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"nothing accepts connections at {host}:{port} ({exc.strerror or exc})"
    return _tls_problem(kafka, host, port, timeout_s) or _handshake_problem(
        kafka, host, port, timeout_s
    )


def connection_problem(kafka: KafkaSettings, timeout_s: float = 5.0) -> str | None:
    """What stops a client with ``kafka`` settings from connecting; None when it connects."""
    problems = []
    for address in kafka.bootstrap_servers.split(","):
        problem = _address_problem(kafka, *_split(address), timeout_s)
        if problem is None:
            return None
        problems.append(problem)
    return "; ".join(problems) or None


async def _first_exchange(kafka: KafkaSettings, host: str, port: int) -> None:
    """Connect as the client would (TLS, ApiVersions, SASL), then ask for metadata: a
    listener that wants SASL answers ApiVersions but closes the connection on this."""
    from aiokafka.protocol.metadata import MetadataRequest

    await _kafka_handshake(
        kafka, host, port, MetadataRequest(topics=[], allow_auto_topic_creation=False)
    )


def handshake_problem(kafka: KafkaSettings, host: str, port: int, timeout_s: float) -> str | None:
    """Whether the listener at ``host:port`` refuses a client with ``kafka`` settings, and why.

    One exchange as that client; only when it fails is the connection retraced
    (:func:`connection_problem`'s steps) for the reason. None when it succeeds,
    and when nothing answers in time: a slow broker is not a settings mistake.
    """
    try:
        asyncio.run(asyncio.wait_for(_first_exchange(kafka, host, port), timeout_s))
    except TimeoutError:
        return None
    except Exception as exc:  # any failure of the exchange: find out which step refuses
        problem = _address_problem(kafka, host, port, timeout_s)
        if problem is None and not kafka.security_protocol.startswith("SASL_"):
            problem = (
                f"{host}:{port} closed the connection at the first request after the "
                f"handshake ({type(exc).__name__}): the listener wants a SASL login; set "
                f"kafka.security_protocol to SASL_{'SSL' if kafka.uses_tls else 'PLAINTEXT'} "
                f"with kafka.sasl_username and kafka.sasl_password; {SECURE_STACK_FIX}"
            )
        if problem is not None and problem.startswith("nothing accepts connections"):
            return None  # gone in between: not a settings mistake (require_kafka's TCP check)
        return problem
    return None


def kafka_python_client(
    factory: Callable[..., T], kafka: KafkaSettings, role: str, **kwargs: Any
) -> T:
    """``factory(**kafka_python_options(kafka, role), **kwargs)`` for a kafka-python client class.

    A failed bootstrap becomes :class:`KafkaRefused` with the cause in one line.
    """
    from kafka.errors import KafkaError

    try:
        return factory(**kafka_python_options(kafka, role), **kwargs)
    except KafkaError as exc:  # "Unable to bootstrap", whatever the cause
        problem = connection_problem(kafka)
        if problem is None:
            raise
        raise KafkaRefused(f"Kafka refused {kafka.client_id}-{role}: {problem}") from exc


def admin_client(kafka: KafkaSettings, role: str = "admin") -> KafkaAdminClient:
    """A kafka-python admin client; the caller closes it.

    Raises :class:`pipeline.kafka.check.KafkaRefused` (one line) when the
    brokers refuse it.
    """
    from kafka import KafkaAdminClient

    return kafka_python_client(KafkaAdminClient, kafka, role)
