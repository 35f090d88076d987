"""How the local stack is laid out (how many Kafka nodes, plaintext or secure) and reached.

``babelstream up`` records the layout it started in ``<home>/run/stack.json``,
so ``status`` and ``down`` find every node without repeating the flags, and
writes the settings its clients need (bootstrap list, replication, TLS files,
credentials) to ``<home>/stack/settings.toml`` and ``settings.env``: point
``BABELSTREAM_CONFIG`` at the first, or ``source`` the second (environment
variables take precedence over the TOML file).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import SecretStr, ValidationError

from pipeline.errors import StackSettingsError
from pipeline.kafka.roles import ROLES, Role, role_user
from pipeline.settings import KafkaSettings, RedisSettings, Settings, StackSettings
from pipeline.stack.secure import load_secrets, tls_files

HOST = "127.0.0.1"
# cluster mode: every topic on 3 replicas, a write needs 2 of them
CLUSTER_REPLICATION = 3
CLUSTER_MIN_INSYNC = 2


@dataclass(frozen=True, slots=True)
class NodePorts:
    """The ports of one Kafka node (node ids start at 1)."""

    node_id: int
    client: int
    controller: int
    # mutual-TLS listener, secure mode only
    ssl: int


def node_ports(stack: StackSettings) -> list[NodePorts]:
    """Every node's ports: the base ports plus ``node_port_step`` per node."""
    return [
        NodePorts(
            node + 1,
            stack.kafka_port + node * stack.node_port_step,
            stack.kafka_controller_port + node * stack.node_port_step,
            stack.kafka_ssl_port + node * stack.node_port_step,
        )
        for node in range(stack.brokers)
    ]


def node_name(stack: StackSettings, node: NodePorts) -> str:
    """``kafka`` on a single node, ``kafka-1`` ... ``kafka-N`` in a cluster."""
    return "kafka" if stack.brokers == 1 else f"kafka-{node.node_id}"


def service_names(stack: StackSettings) -> list[str]:
    """The stack's services in start order (PID files are ``<home>/run/<name>.pid``)."""
    return [*(node_name(stack, node) for node in node_ports(stack)), "redis"]


def with_layout(
    settings: Settings, brokers: int | None = None, secure: bool | None = None
) -> Settings:
    """``settings`` with ``--brokers`` / ``--secure`` applied and replication made consistent.

    Without a flag or an explicit setting, the layout of the stack ``up`` last
    started under the same home is kept. On several nodes, replication factor
    and min ISR default to 3 / 2 (capped at the node count); values set
    explicitly are kept but must fit the node count. A mismatch is a one-line
    StackSettingsError.
    """
    recorded = recorded_layout(settings)
    given = settings.stack.model_fields_set
    if recorded is not None:
        if brokers is None and "brokers" not in given:
            brokers = recorded.stack.brokers
        if secure is None and "secure" not in given:
            secure = recorded.stack.secure
    stack_update: dict[str, Any] = {}
    if brokers is not None:
        stack_update["brokers"] = brokers
    if secure is not None:
        stack_update["secure"] = secure
    try:
        stack = StackSettings.model_validate({**_fields(settings.stack), **stack_update})
    except ValidationError as exc:
        raise StackSettingsError(_one_line(exc)) from exc
    kafka = settings.kafka
    explicit = kafka.model_fields_set
    kafka_update: dict[str, Any] = {}
    if stack.brokers > 1:
        if "replication_factor" not in explicit:
            kafka_update["replication_factor"] = min(CLUSTER_REPLICATION, stack.brokers)
        replication = kafka_update.get("replication_factor", kafka.replication_factor)
        if "min_insync_replicas" not in explicit:
            kafka_update["min_insync_replicas"] = max(1, min(CLUSTER_MIN_INSYNC, replication - 1))
    try:
        kafka = KafkaSettings.model_validate({**_fields(kafka), **kafka_update})
    except ValidationError as exc:
        raise StackSettingsError(_one_line(exc)) from exc
    if kafka.replication_factor > stack.brokers:
        raise StackSettingsError(
            f"kafka.replication_factor is {kafka.replication_factor} but the stack "
            f"has {stack.brokers} broker(s): set BABELSTREAM_KAFKA__"
            f"REPLICATION_FACTOR to at most {stack.brokers}"
        )
    if stack.brokers > 1 and kafka.replication_factor == 1:
        raise StackSettingsError(
            f"a {stack.brokers}-broker stack with kafka.replication_factor 1 loses "
            "partitions with any node: set BABELSTREAM_KAFKA__REPLICATION_FACTOR="
            f"{min(CLUSTER_REPLICATION, stack.brokers)} (or leave it unset)"
        )
    return settings.model_copy(update={"stack": stack, "kafka": kafka})


def _fields(section: Any) -> dict[str, Any]:
    """A section's values as given (``model_dump`` would unwrap nothing: SecretStr stays)."""
    return {name: getattr(section, name) for name in type(section).model_fields}


def _one_line(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        where = ".".join(map(str, error["loc"]))
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def _record_path(home: Path) -> Path:
    return home / "run" / "stack.json"


def record_layout(settings: Settings) -> None:
    """Remember the layout of the stack ``up`` started."""
    path = _record_path(settings.stack.home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "brokers": settings.stack.brokers,
                "secure": settings.stack.secure,
                "replication_factor": settings.kafka.replication_factor,
                "min_insync_replicas": settings.kafka.min_insync_replicas,
            }
        )
    )


def forget_layout(home: Path) -> None:
    _record_path(home).unlink(missing_ok=True)


def recorded_layout(settings: Settings) -> Settings | None:
    """``settings`` with the layout of the stack ``up`` last started, None when none is recorded."""
    try:
        raw = json.loads(_record_path(settings.stack.home).read_text())
        stack = StackSettings.model_validate(
            {**_fields(settings.stack), "brokers": raw["brokers"], "secure": raw["secure"]}
        )
        kafka = KafkaSettings.model_validate(
            {
                **_fields(settings.kafka),
                "replication_factor": raw["replication_factor"],
                "min_insync_replicas": raw["min_insync_replicas"],
            }
        )
    except (OSError, ValueError, KeyError):
        return None
    return settings.model_copy(update={"stack": stack, "kafka": kafka})


def describe(settings: Settings) -> str:
    """``3 brokers, secure`` — for messages."""
    stack = settings.stack
    nodes = f"{stack.brokers} broker{'s' if stack.brokers > 1 else ''}"
    return f"{nodes}, {'secure' if stack.secure else 'plaintext'}"


def client_settings(
    settings: Settings, *, mutual_tls: bool = False, role: Role | None = None
) -> Settings:
    """How clients reach the stack ``settings`` describes (its ``kafka`` and ``redis`` sections).

    Secure stacks: SASL_SSL (SCRAM-SHA-512) to the client ports as the services' super
    user, or as ``role``'s user (allowed only what the role needs), or with
    ``mutual_tls`` SSL with the client certificate to the mutual-TLS ports;
    Redis over TLS as the ACL user.
    """
    stack = settings.stack
    nodes = node_ports(stack)
    kafka: dict[str, Any] = {**_fields(settings.kafka)}
    redis: dict[str, Any] = {
        **_fields(settings.redis),
        "url": f"redis://{HOST}:{stack.redis_port}/0",
    }
    kafka["bootstrap_servers"] = ",".join(f"{HOST}:{node.client}" for node in nodes)
    if stack.secure:
        stack_secrets = load_secrets(stack.home)
        tls = tls_files(stack.home)
        kafka.update(ssl_cafile=tls.ca, ssl_check_hostname=True)
        if mutual_tls:
            kafka.update(
                bootstrap_servers=",".join(f"{HOST}:{node.ssl}" for node in nodes),
                security_protocol="SSL",
                ssl_certfile=tls.client_keystore,
            )
        else:
            kafka.update(
                security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username=stack_secrets.kafka_username if role is None else role_user(role),
                sasl_password=stack_secrets.kafka_password
                if role is None
                else stack_secrets.role_passwords[role],
            )
        redis.update(
            url=f"rediss://{HOST}:{stack.redis_port}/0",
            ssl_ca_certs=tls.ca,
            username=stack_secrets.redis_username,
            password=stack_secrets.redis_password,
        )
    return settings.model_copy(
        update={
            "kafka": KafkaSettings.model_validate(kafka),
            "redis": RedisSettings.model_validate(redis),
        }
    )


# The fields the settings files carry: connection, security and replication.
_KAFKA_KEYS = (
    "bootstrap_servers",
    "replication_factor",
    "min_insync_replicas",
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_key_password",
    "ssl_check_hostname",
)
_REDIS_KEYS = ("url", "username", "password", "ssl_ca_certs", "ssl_check_hostname")


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Path):
        return str(value)
    return value


def client_sections(settings: Settings, role: Role | None = None) -> dict[str, dict[str, Any]]:
    """The ``kafka`` / ``redis`` values of :func:`client_settings`, secrets in clear (for files)."""
    clients = client_settings(settings, role=role)
    sections: dict[str, dict[str, Any]] = {}
    for name, section, keys in (
        ("kafka", clients.kafka, _KAFKA_KEYS),
        ("redis", clients.redis, _REDIS_KEYS),
    ):
        sections[name] = {
            key: _plain(getattr(section, key)) for key in keys if getattr(section, key) is not None
        }
    return sections


def settings_files(home: Path) -> tuple[Path, Path]:
    """``settings.toml`` and ``settings.env`` for the stack's clients."""
    folder = home / "stack"
    return folder / "settings.toml", folder / "settings.env"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.with_suffix(".tmp").replace(path)


def client_environment(settings: Settings, role: Role | None = None) -> dict[str, str]:
    """The ``BABELSTREAM_*`` variables of :func:`client_sections` (for a child process)."""
    return {
        f"BABELSTREAM_{section.upper()}__{key.upper()}": json.dumps(value)
        if isinstance(value, bool)
        else str(value)
        for section, values in client_sections(settings, role).items()
        for key, value in values.items()
    }


def role_settings_folder(home: Path) -> Path:
    """Where a secure stack's settings files per role are (:func:`role_settings_files`)."""
    return home / "stack" / "roles"


def role_settings_files(home: Path, role: Role) -> tuple[Path, Path]:
    """``roles/<role>.toml`` and ``roles/<role>.env``: a secure stack's clients as ``role``."""
    folder = role_settings_folder(home)
    return folder / f"{role}.toml", folder / f"{role}.env"


def write_client_settings(settings: Settings) -> tuple[Path, Path]:
    """Write the client settings files (mode 0600: they hold the credentials), and on a
    secure stack one pair per role (:func:`role_settings_files`)."""
    files: dict[Role | None, tuple[Path, Path]] = {None: settings_files(settings.stack.home)}
    if settings.stack.secure:
        files |= {role: role_settings_files(settings.stack.home, role) for role in ROLES}
    for role, (toml_path, env_path) in files.items():
        who = "" if role is None else f" as the {role} role"
        _write_private(
            toml_path,
            f"# written by `babelstream up`: how clients reach this stack{who}\n"
            + tomli_w.dumps(client_sections(settings, role)),
        )
        lines = [f"# written by `babelstream up`: source it to reach this stack{who}"]
        lines += [
            f"export {name}={shlex.quote(value)}"
            for name, value in client_environment(settings, role).items()
        ]
        _write_private(env_path, "\n".join(lines) + "\n")
    return files[None]
