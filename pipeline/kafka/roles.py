"""One Kafka principal per role of the services, each allowed only what its role needs.

On a cluster whose brokers authorize requests (``babelstream up --secure``), each
service can run as the SCRAM user of its role, ``babelstream-<role>``, instead of
the services' super user. :func:`role_grants` is what each may do, and nothing
else is allowed (the brokers refuse what no ACL grants):

* only the router writes the interactive work topics, and only the router and a
  bulk runner the bulk ones;
* only the translation workers read the work topics;
* tenants' texts on the reply topics are read by their tenant and, for the
  gateway's and bulk runs' own reply topics, by that service only;
* only the operator reads the dead letters, the quarantine and the shared
  results beside the SLA job, and manages topics, groups, users and ACLs (so
  the operator is the cluster's administrator).

The table of the security page is this module's, rendered by
:func:`grant_rows`; a unit test keeps the two the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourceType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from pydantic import SecretStr

from pipeline.contract.pairs import (
    BULK_REPLY_LABEL,
    BULK_WORK_PREFIX,
    CANCEL_TOPIC,
    DLQ_TOPIC,
    GATEWAY_GROUP_PREFIX,
    GATEWAY_REPLY_LABEL,
    QUARANTINE_TOPIC,
    REPLAY_TRANSACTION_SUFFIX,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    SLA_LATE_TOPIC,
    SLA_TOPIC,
    SLA_TRANSACTION_PREFIX,
    TENANT_INGRESS_PREFIX,
    TICKS_TOPIC,
    WORK_PREFIX,
)
from pipeline.errors import BabelStreamError
from pipeline.kafka.check import admin_client
from pipeline.settings import KafkaSettings

Role = Literal["router", "worker", "sla", "gateway", "bulk", "operator"]
ROLES: tuple[Role, ...] = get_args(Role)
ROLE_USER_PREFIX = "babelstream-"
# the workers' consumer groups, their Faust topics (table changelogs, the assignor's)
# and the gateway's and the tenant gate's groups all start with the app's id
APP_PREFIX = "babelstream"
# reply topics of the services themselves: <replies.prefix>gateway.<instance>.<process>,
# <replies.prefix>bulk.<job>.<random>; no tenant may be named so (tenants.py)
SERVICE_REPLY_LABELS = (GATEWAY_REPLY_LABEL, BULK_REPLY_LABEL)

Op = ACLOperation
READ = (Op.READ, Op.DESCRIBE)
WRITE = (Op.WRITE, Op.DESCRIBE)
READ_WRITE = (Op.READ, Op.WRITE, Op.DESCRIBE)
# the topics a service creates at start or for a call, and checks the configs of
CREATE = (Op.CREATE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
OWN = (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
GROUP = (Op.READ, Op.DESCRIBE)
# describing the cluster (its replication defaults) and producing idempotently
CLUSTER = (Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE)


@dataclass(frozen=True)
class Grant:
    """Operations on one resource, or on every resource whose name starts with ``name``."""

    kind: Literal["topic", "group", "cluster", "transactional-id"]
    name: str
    operations: tuple[ACLOperation, ...]
    prefixed: bool = False

    @property
    def shown(self) -> str:
        """The resource as the security page names it: ``topic translate.work.*``."""
        if self.kind == "cluster":
            return "cluster"
        if self.name == "*":
            return f"every {self.kind}"
        return f"{self.kind} `{self.name}{'*' if self.prefixed else ''}`"


def _topic(name: str, operations: tuple[ACLOperation, ...]) -> Grant:
    return Grant("topic", name, operations)


def _topics(prefix: str, operations: tuple[ACLOperation, ...]) -> Grant:
    return Grant("topic", prefix, operations, prefixed=True)


def role_grants(role: Role, replies_prefix: str, client_id: str) -> tuple[Grant, ...]:
    """Everything ``role``'s principal may do (see the module docstring)."""
    cluster = Grant("cluster", "kafka-cluster", CLUSTER)
    faust = (
        # the app's own topics (table changelogs, the assignor's) and its groups
        _topics(APP_PREFIX, OWN),
        Grant("group", APP_PREFIX, GROUP, prefixed=True),
        # the project's topics it creates at start when missing
        _topics("translate.", CREATE),
        _topic(TICKS_TOPIC, WRITE),
        _topic(CANCEL_TOPIC, READ),
        _topic(QUARANTINE_TOPIC, READ),
    )
    results = (
        _topic(RESULTS_TOPIC, WRITE),
        _topics(replies_prefix, WRITE),
        _topic(DLQ_TOPIC, WRITE),
    )
    own_replies = (Op.READ, Op.CREATE, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS)
    grants: dict[Role, tuple[Grant, ...]] = {
        "router": (
            cluster,
            *faust,
            _topic(REQUESTS_TOPIC, READ_WRITE),  # the tenant gate forwards stamped requests
            _topics(TENANT_INGRESS_PREFIX, READ),
            _topics(WORK_PREFIX, WRITE),
            _topics(BULK_WORK_PREFIX, WRITE),
            _topic(CANCEL_TOPIC, WRITE),  # tenants' cancels, stamped
            *results,
        ),
        "worker": (
            cluster,
            *faust,
            _topics(WORK_PREFIX, READ),
            _topics(BULK_WORK_PREFIX, READ),
            _topic(QUARANTINE_TOPIC, WRITE),  # records set apart
            *results,
        ),
        "sla": (
            cluster,
            _topic(RESULTS_TOPIC, READ),
            _topic(TICKS_TOPIC, READ),
            _topic(SLA_TOPIC, READ_WRITE),  # and the dashboard reads it
            _topic(SLA_LATE_TOPIC, READ_WRITE),
            Grant("transactional-id", SLA_TRANSACTION_PREFIX, WRITE, prefixed=True),
            # each sink's mark: an offset committed for a group named like its id
            Grant("group", SLA_TRANSACTION_PREFIX, GROUP, prefixed=True),
            # Spark's Kafka source names its consumer groups so
            Grant("group", "spark-kafka-", GROUP, prefixed=True),
        ),
        "gateway": (
            cluster,
            _topic(REQUESTS_TOPIC, WRITE),
            _topics(f"{replies_prefix}{GATEWAY_REPLY_LABEL}.", own_replies),
            Grant("group", GATEWAY_GROUP_PREFIX, GROUP, prefixed=True),
        ),
        "bulk": (
            cluster,
            _topics(BULK_WORK_PREFIX, WRITE),
            _topics(f"{replies_prefix}{BULK_REPLY_LABEL}.", own_replies),
            _topic(CANCEL_TOPIC, WRITE),  # bulk cancel
            _topic(RESULTS_TOPIC, READ),  # bulk spark-assemble
        ),
        "operator": (
            Grant("cluster", "kafka-cluster", (Op.ALL,)),
            _topics("translate.", (Op.ALL,)),
            _topics(APP_PREFIX, (Op.ALL,)),
            Grant("group", "*", (Op.ALL,)),  # every group: offsets reset, lag in status
            Grant("transactional-id", f"{client_id}{REPLAY_TRANSACTION_SUFFIX}", WRITE),
        ),
    }
    return grants[role]


def role_user(role: Role) -> str:
    """The SCRAM user of ``role``: ``babelstream-router``, ..."""
    return ROLE_USER_PREFIX + role


_RESOURCE_TYPES: Mapping[str, ResourceType] = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
}


def role_acls(role: Role, replies_prefix: str, client_id: str) -> list[ACL]:
    """The ACLs that allow ``role``'s user what :func:`role_grants` says."""
    principal = f"User:{role_user(role)}"
    acls = []
    for grant in role_grants(role, replies_prefix, client_id):
        pattern = ResourcePattern(
            _RESOURCE_TYPES[grant.kind],
            grant.name,
            ACLResourcePatternType.PREFIXED if grant.prefixed else ACLResourcePatternType.LITERAL,
        )
        acls += [
            ACL(principal, "*", op, ACLPermissionType.ALLOW, pattern) for op in grant.operations
        ]
    return acls


def grant_rows(replies_prefix: str, client_id: str) -> Iterator[tuple[Role, str, str]]:
    """(role, resource, operations), a row per resource of each role: the security page's
    table."""
    for role in ROLES:
        merged: dict[str, list[ACLOperation]] = {}
        for grant in role_grants(role, replies_prefix, client_id):
            held = merged.setdefault(grant.shown, [])
            held += [op for op in grant.operations if op not in held]
        for shown, operations in merged.items():
            yield role, shown, ", ".join(op.name.lower() for op in operations)


class RoleError(BabelStreamError):
    """The cluster refused a role's user or ACLs."""


def scram_mechanism(kafka: KafkaSettings) -> ScramMechanism:
    """The SCRAM mechanism of users made on this cluster: the one its clients log in with."""
    if kafka.sasl_mechanism == "SCRAM-SHA-256":
        return ScramMechanism.SCRAM_SHA_256
    return ScramMechanism.SCRAM_SHA_512


def ensure_roles(
    kafka: KafkaSettings, replies_prefix: str, passwords: Mapping[Role, SecretStr]
) -> None:
    """Make (or update) each role's user with its password, and grant it its ACLs; run
    again, it changes nothing (ACLs are a set on the brokers)."""
    admin = admin_client(kafka, "roles")
    try:
        failed = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    role_user(role), scram_mechanism(kafka), password.get_secret_value()
                )
                for role, password in passwords.items()
            ]
        )
        refused = {user: error for user, error in failed.items() if error}
        if refused:
            raise RoleError(f"could not make the roles' Kafka users: {refused}")
        acls = [
            acl for role in passwords for acl in role_acls(role, replies_prefix, kafka.client_id)
        ]
        created = admin.create_acls(acls)
        if created.get("failed"):
            raise RoleError(f"could not grant the roles their ACLs: {created['failed']}")
    finally:
        admin.close()
