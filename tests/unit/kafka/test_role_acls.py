"""The roles' ACLs: who may read and write which topic, as the brokers would match them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kafka.admin import ACL, ACLOperation, ACLResourcePatternType, ResourceType

from pipeline.contract.pairs import (
    DLQ_TOPIC,
    QUARANTINE_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    SLA_TOPIC,
    bulk_work_topic,
    work_topic,
)
from pipeline.kafka.roles import ROLES, Role, grant_rows, role_acls, role_user
from pipeline.kafka.tenants import TenantError, tenant_user
from pipeline.settings import PROJECT_ROOT, ReplySettings
from pipeline.stack.secure import ensure_secrets, load_secrets

PREFIX = ReplySettings().prefix
CLIENT_ID = "babelstream"


def allowed(acl: ACL, operation: ACLOperation, kind: ResourceType, name: str) -> bool:
    """Whether ``acl`` allows ``operation`` on the resource, as the brokers match it."""
    pattern = acl.resource_pattern
    if pattern.resource_type != kind or acl.operation not in (operation, ACLOperation.ALL):
        return False
    if pattern.pattern_type == ACLResourcePatternType.PREFIXED:
        return name.startswith(pattern.resource_name)
    return pattern.resource_name in (name, "*")


def roles_that(operation: ACLOperation, topic: str) -> set[Role]:
    return {
        role
        for role in ROLES
        if any(
            allowed(acl, operation, ResourceType.TOPIC, topic)
            for acl in role_acls(role, PREFIX, CLIENT_ID)
        )
    }


def test_only_the_router_writes_the_work_topics_and_only_workers_read_them() -> None:
    work, bulk = work_topic("m"), bulk_work_topic("m")
    assert roles_that(ACLOperation.WRITE, work) == {"router", "operator"}
    assert roles_that(ACLOperation.WRITE, bulk) == {"router", "bulk", "operator"}
    for topic in (work, bulk):
        assert roles_that(ACLOperation.READ, topic) == {"worker", "operator"}


def test_only_the_operator_reads_dead_letters_and_quarantine_beside_the_services() -> None:
    assert roles_that(ACLOperation.READ, DLQ_TOPIC) == {"operator"}
    assert roles_that(ACLOperation.READ, QUARANTINE_TOPIC) == {"router", "worker", "operator"}
    assert roles_that(ACLOperation.READ, RESULTS_TOPIC) == {"sla", "bulk", "operator"}
    assert roles_that(ACLOperation.WRITE, SLA_TOPIC) == {"sla", "operator"}
    assert roles_that(ACLOperation.WRITE, REQUESTS_TOPIC) == {"router", "gateway", "operator"}


def test_no_service_reads_a_tenants_reply_topics() -> None:
    assert roles_that(ACLOperation.READ, f"{PREFIX}acme.results") == {"operator"}
    assert roles_that(ACLOperation.READ, f"{PREFIX}gateway.g1.0") == {"gateway", "operator"}
    assert roles_that(ACLOperation.READ, f"{PREFIX}bulk.job.abc") == {"bulk", "operator"}


@pytest.mark.parametrize("name", ["gateway", "bulk", "Gateway"])
def test_a_tenant_may_not_be_named_as_a_services_reply_topics(name: str) -> None:
    with pytest.raises(TenantError, match="reply topics"):
        tenant_user(name)


def test_each_role_has_its_own_user() -> None:
    principals = {
        role: {acl.principal for acl in role_acls(role, PREFIX, CLIENT_ID)} for role in ROLES
    }
    assert principals == {role: {f"User:{role_user(role)}"} for role in ROLES}


def test_the_security_page_lists_each_roles_acls_as_the_code_grants_them() -> None:
    page = (PROJECT_ROOT / "docs" / "operating" / "security.md").read_text(encoding="utf-8")
    table = page.split("| role | resource | operations |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[
        0
    ]
    shown = [
        tuple(cell.strip() for cell in row.strip("|").split("|")) for row in table.splitlines()
    ]
    assert shown == list(grant_rows(PREFIX, CLIENT_ID))


def test_secrets_of_an_earlier_release_get_the_roles_passwords(tmp_path: Path) -> None:
    path = tmp_path / "secure" / "secrets.json"
    path.parent.mkdir()
    earlier = {
        "kafka_username": "babelstream",
        "kafka_password": "kept",
        "redis_username": "babelstream",
        "redis_password": "kept-too",
    }
    path.write_text(json.dumps(earlier))
    secrets = ensure_secrets(tmp_path)
    assert secrets.kafka_password.get_secret_value() == "kept"
    assert set(secrets.role_passwords) == set(ROLES)
    passwords = {r: p.get_secret_value() for r, p in secrets.role_passwords.items()}
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{32}", p) for p in passwords.values())
    again = load_secrets(tmp_path)  # kept: the brokers know these passwords now
    assert {r: p.get_secret_value() for r, p in again.role_passwords.items()} == passwords
    assert path.stat().st_mode & 0o777 == 0o600
