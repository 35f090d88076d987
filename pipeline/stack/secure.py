"""Secrets of the secure local stack: the SCRAM users (the services' super user and one
per role, :mod:`pipeline.kafka.roles`) and the Redis ACL user.

Generated once (``secrets.token_urlsafe``) into ``<stack home>/secure/secrets.json``
(mode 0600) and kept as ``SecretStr``, so they never show in a repr, a log
line or ``status --json``; clients get them through the settings files
:func:`pipeline.stack.layout.write_client_settings` writes beside them.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from pipeline.errors import StackError
from pipeline.kafka.roles import ROLES, Role
from pipeline.stack.tls import TlsFiles, ensure_tls

KAFKA_USER = "babelstream"
REDIS_USER = "babelstream"


@dataclass(frozen=True)
class StackSecrets:
    """Credentials of the secure stack's users."""

    kafka_username: str
    kafka_password: SecretStr
    redis_username: str
    redis_password: SecretStr
    # the password of each role's SCRAM user, babelstream-<role>
    role_passwords: dict[Role, SecretStr]


def secure_dir(home: Path) -> Path:
    """Where the secure stack keeps its secrets, certificates and client settings."""
    return home / "secure"


def _path(home: Path) -> Path:
    return secure_dir(home) / "secrets.json"


def load_secrets(home: Path) -> StackSecrets:
    """The secrets ``babelstream up --secure`` generated; StackError when there are none."""
    try:
        raw = json.loads(_path(home).read_text())
        return StackSecrets(
            kafka_username=raw["kafka_username"],
            kafka_password=SecretStr(raw["kafka_password"]),
            redis_username=raw["redis_username"],
            redis_password=SecretStr(raw["redis_password"]),
            role_passwords={role: SecretStr(raw["roles"][role]) for role in ROLES},
        )
    except (OSError, ValueError, KeyError) as exc:
        raise StackError(
            f"no secrets of a secure stack under {secure_dir(home)} "
            "(`babelstream up --secure` creates them)"
        ) from exc


def ensure_secrets(home: Path) -> StackSecrets:
    """Load the secrets, generating them the first time (and a role's password when the
    secrets of an earlier release have none for it)."""
    path = _path(home)
    raw: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if raw and set(raw.get("roles", {})) >= set(ROLES):
        return load_secrets(home)
    raw = {
        "kafka_username": KAFKA_USER,
        "kafka_password": secrets.token_urlsafe(24),
        "redis_username": REDIS_USER,
        "redis_password": secrets.token_urlsafe(24),
        **raw,
    }
    raw["roles"] = {role: secrets.token_urlsafe(24) for role in ROLES} | raw.get("roles", {})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(raw, out)
    path.with_suffix(".tmp").replace(path)
    return load_secrets(home)


def tls_files(home: Path) -> TlsFiles:
    """The secure stack's PEM files (they may not exist yet)."""
    return TlsFiles(secure_dir(home) / "tls")


def ensure_secure_material(home: Path) -> tuple[StackSecrets, TlsFiles]:
    """Secrets and certificates, generated when missing."""
    return ensure_secrets(home), ensure_tls(tls_files(home).folder)


@dataclass(frozen=True)
class ServiceSecrets:
    """What one secure service (a Kafka node, Redis) needs: the certificates and its user."""

    tls: TlsFiles
    username: str
    password: SecretStr


def service_secrets(home: Path, service: Literal["kafka", "redis"]) -> ServiceSecrets:
    """The certificates and the user of ``service`` in the secure stack under ``home``."""
    stack_secrets = load_secrets(home)
    if service == "kafka":
        return ServiceSecrets(
            tls_files(home), stack_secrets.kafka_username, stack_secrets.kafka_password
        )
    return ServiceSecrets(
        tls_files(home), stack_secrets.redis_username, stack_secrets.redis_password
    )
