"""Tenants on a secured Kafka cluster: one SCRAM user each, and ACLs that give it its own
topics and nothing else (``babelstream tenants add | list | remove``).

A tenant's user ``tenant-<tenant>`` may write to its own ingress
(``translate.ingress.<tenant>``; workers stamp the tenant from the topic, see
:mod:`pipeline.control.tenancy`) and read, create and delete its own reply topics
(``<replies.prefix><tenant>.*``). It may not read ``translate.results``, the
dead letters, quarantine, SLA or work topics, nor write to anything else: the
brokers' authorizer refuses whatever no ACL allows.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.errors import SecurityDisabledError, UnknownTopicOrPartitionError
from pydantic import SecretStr

from pipeline.contract.pairs import (
    check_topic_tenant,
    default_reply_topic,
    tenant_ingress_topic,
    tenant_reply_prefix,
)
from pipeline.errors import BabelStreamError
from pipeline.kafka.check import admin_client
from pipeline.kafka.roles import SERVICE_REPLY_LABELS, scram_mechanism
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import KafkaSettings, ReplySettings

if TYPE_CHECKING:
    from kafka import KafkaAdminClient

TENANT_USER_PREFIX = "tenant-"


class TenantError(BabelStreamError):
    """A tenant command the cluster refused (no authorizer, not allowed, unknown tenant)."""


@dataclass(frozen=True)
class TenantCredentials:
    """A tenant's Kafka user and its password (shown once, when it is made)."""

    tenant: str
    username: str
    password: SecretStr


def tenant_user(tenant: str) -> str:
    """The Kafka user (SCRAM) of ``tenant``; a name the services' own reply topics use
    (``gateway``, ``bulk``) is refused: that tenant could read them."""
    if tenant.lower() in SERVICE_REPLY_LABELS:
        raise TenantError(
            f"{tenant!r} cannot name a tenant: the services' reply topics are "
            f"{'/'.join(SERVICE_REPLY_LABELS)}.*, and that tenant could read them"
        )
    return TENANT_USER_PREFIX + check_topic_tenant(tenant)


def tenant_acls(tenant: str, replies: ReplySettings) -> list[ACL]:
    """Everything ``tenant``'s user may do: write its ingress; use its reply topics."""

    principal = f"User:{tenant_user(tenant)}"
    ingress = ResourcePattern(ResourceType.TOPIC, tenant_ingress_topic(tenant))
    own_replies = ResourcePattern(
        ResourceType.TOPIC,
        tenant_reply_prefix(replies.prefix, tenant),
        ACLResourcePatternType.PREFIXED,
    )
    grants = [
        (ingress, ACLOperation.WRITE),
        (ingress, ACLOperation.DESCRIBE),
        *(
            (own_replies, op)
            for op in (
                ACLOperation.READ,
                ACLOperation.DESCRIBE,
                ACLOperation.CREATE,
                ACLOperation.DELETE,
            )
        ),
    ]
    return [ACL(principal, "*", op, ACLPermissionType.ALLOW, res) for res, op in grants]


@contextlib.contextmanager
def _admin(kafka: KafkaSettings) -> Iterator[KafkaAdminClient]:
    admin = admin_client(kafka, "tenants")
    try:
        yield admin
    finally:
        admin.close()


def _refusal(error: object) -> TenantError:
    if isinstance(error, SecurityDisabledError):
        return TenantError(
            "the cluster has no authorizer, so a tenant's user could do anything; tenants "
            "on Kafka need a secured cluster (`babelstream up --secure`)"
        )
    return TenantError(f"the cluster refused it: {error}")


def add_tenant(kafka: KafkaSettings, replies: ReplySettings, tenant: str) -> TenantCredentials:
    """Make ``tenant``'s user, its ACLs, its ingress and its default reply topic."""
    username, password = tenant_user(tenant), secrets.token_urlsafe(24)
    with _admin(kafka) as admin:
        _check_authorizer(admin)
        failed = admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(username, scram_mechanism(kafka), password)]
        ).get(username)
        if failed:
            raise TenantError(f"could not make Kafka user {username}: {failed}")
        created = admin.create_acls(tenant_acls(tenant, replies))
        if created.get("failed"):
            raise TenantError(f"could not grant {username} its ACLs: {created['failed']}")
    reply_spec = TopicSpec(replies.partitions, {"retention.ms": str(replies.retention_ms)})
    ensure_topics(
        kafka,
        {
            tenant_ingress_topic(tenant): TopicSpec(kafka.ingress_partitions),
            default_reply_topic(replies.prefix, tenant): reply_spec,
        },
    )
    return TenantCredentials(tenant, username, SecretStr(password))


def remove_tenant(kafka: KafkaSettings, tenant: str) -> None:
    """Take ``tenant``'s ACLs (refused from its next request on) and its user away, and
    delete its ingress topic (its reply topics expire with their retention)."""
    username = tenant_user(tenant)
    with _admin(kafka) as admin:
        _check_authorizer(admin)
        if username not in _scram_users(admin):
            raise TenantError(f"no tenant {tenant!r} (`babelstream tenants list`)")
        admin.delete_acls([_acls_of(f"User:{username}")])
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(username, scram_mechanism(kafka))]
        )
        with contextlib.suppress(UnknownTopicOrPartitionError):
            admin.delete_topics([tenant_ingress_topic(tenant)])


def list_tenants(kafka: KafkaSettings) -> list[str]:
    """The tenants that have a Kafka user, by name."""
    with _admin(kafka) as admin:
        users = _scram_users(admin)
    return sorted(u[len(TENANT_USER_PREFIX) :] for u in users if u.startswith(TENANT_USER_PREFIX))


def _scram_users(admin: KafkaAdminClient) -> set[str]:
    described = admin.describe_user_scram_credentials()
    return {user for user, info in described.items() if not info.get("error")}


def _acls_of(principal: str | None) -> ACLFilter:
    """Every ACL of ``principal`` (None: of anyone)."""
    anything = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
    return ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY, anything)


def _check_authorizer(admin: KafkaAdminClient) -> None:
    """TenantError unless the brokers authorize requests (ACLs would mean nothing)."""
    try:
        admin.describe_acls(_acls_of(None))  # raises the brokers' error (SecurityDisabled: none)
    except Exception as exc:
        raise _refusal(exc) from exc
