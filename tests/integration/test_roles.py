"""Each service as its role's principal on the secure stack, allowed only what it needs.

One secure single-node stack (its brokers authorize every request). `up --secure`
made a SCRAM user per role with the ACLs of :mod:`pipeline.kafka.roles`; here the
router, a translation worker, the gateway, the SLA job, a bulk run and the operator's
commands each run as their role's user only, and a request goes all the way through
them. Then each role tries what it does not need, and the brokers refuse it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from kafka.errors import TopicAuthorizationFailedError

from pipeline.contract.pairs import (
    DLQ_TOPIC,
    QUARANTINE_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    bulk_work_topic,
    work_topic,
)
from pipeline.gateway.process import GatewayProcess
from pipeline.kafka.roles import ROLES, Role
from pipeline.kafka.tenants import TenantError, add_tenant
from pipeline.pseudo_locale import to_pseudo
from pipeline.settings import Settings
from pipeline.stack import layout
from pipeline.stack.local_worker import DEMO_MODEL, WorkerProcess
from tests.integration.stacks import running_stack
from tests.integration.test_tenant_isolation import described, produce, refused, request

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with running_stack(tmp_path_factory.mktemp("roles"), brokers=1, secure=True) as settings:
        yield settings


def as_role(stack: Settings, role: Role) -> Settings:
    return layout.client_settings(stack, role=role)


def role_env(stack: Settings, role: Role) -> dict[str, str]:
    """The variables a service of ``role`` runs with: the role's own user, nothing else."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("BABELSTREAM_")}
    return {**inherited, **layout.client_environment(stack, role)}


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("roles-logs")


@pytest.fixture(scope="module")
def services(stack: Settings, logs: Path) -> Iterator[GatewayProcess]:
    """The router, a translation worker and the gateway, each as its role's user."""
    router = WorkerProcess(
        as_role(stack, "router"),
        log_path=logs / "router.log",
        env=role_env(stack, "router"),
        args=["--router-only"],
        probe=False,
    )
    worker = WorkerProcess(
        as_role(stack, "worker"),
        log_path=logs / "worker.log",
        env=role_env(stack, "worker"),
        args=["--models", DEMO_MODEL, "--no-router"],
        probe=False,
    )
    env = {
        **role_env(stack, "gateway"),
        "BABELSTREAM_GATEWAY__INSTANCE_ID": f"roles-{uuid.uuid4().hex[:6]}",
        "BABELSTREAM_GATEWAY__FILES_DIR": str(logs / "files"),
    }
    gateway = GatewayProcess(as_role(stack, "gateway"), log_path=logs / "gateway.log", env=env)
    with router.start(), worker.start(), gateway:
        yield gateway


def babelstream(
    stack: Settings, role: Role, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        env=role_env(stack, role),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_call_goes_through_the_router_worker_and_gateway_each_as_its_role(
    services: GatewayProcess,
) -> None:
    answer = requests.post(
        f"{services.url}/translate",
        json={"q": "Hello world", "source": "en", "target": "en-XA"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["translatedText"] == to_pseudo("Hello world")


def test_the_sla_job_bulk_runs_and_the_operator_work_as_their_roles(
    stack: Settings, services: GatewayProcess, tmp_path: Path
) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("Good morning.\n", encoding="utf-8")
    bulk = babelstream(
        stack, "bulk", "bulk", "run", "corpus", "--src", "en", "--tgt", "en-XA",
        "-o", "out.parquet", cwd=tmp_path,
    )  # fmt: skip
    assert bulk.returncode == 0, bulk.stderr
    assert "documents {'ok': 1}" in bulk.stdout, bulk.stdout
    # A window is emitted once the ticks carry the watermark past its end: with the
    # default 30 s lateness that may come after the idle stop, which the results'
    # age (the machine's load) decides. A 1 s lateness closes them within it.
    sla = babelstream(
        stack, "sla", "sla", "--until-idle", "15s", "--checkpoint", str(tmp_path / "sla"),
        "--window", "1s", "--watermark", "1s", "--sinks", "kafka,console", cwd=tmp_path,
    )  # fmt: skip
    assert sla.returncode == 0, sla.stderr[-3000:]
    assert "en_en-XA" in sla.stdout, sla.stdout
    letters = babelstream(stack, "operator", "dlq", "list", "--since", "1h", "--json", cwd=tmp_path)
    assert letters.returncode == 0, letters.stderr


def test_each_role_is_refused_what_it_does_not_need(stack: Settings) -> None:
    kafka = {role: as_role(stack, role).kafka for role in ROLES}
    work, bulk_work = work_topic(DEMO_MODEL), bulk_work_topic(DEMO_MODEL)
    _, value = request("Hello")

    def unreadable(role: Role, topic: str) -> None:
        # a consumer of a topic it may not read reads nothing, silently, so the brokers'
        # own answer is checked: the topic hidden, or shown without the right to read it
        assert described(kafka["operator"], topic)[0] == 0, topic
        code, operations = described(kafka[role], topic)
        hidden = (code, operations) == (TopicAuthorizationFailedError.errno, None)
        assert hidden or (code == 0 and "READ" not in (operations or [])), (role, topic)

    # only translation workers read the work topics
    unreadable("router", work)
    unreadable("gateway", bulk_work)
    # only the router writes them (and bulk runs the bulk ones)
    refused(lambda: produce(kafka["worker"], work, value))
    refused(lambda: produce(kafka["bulk"], work, value))
    refused(lambda: produce(kafka["gateway"], bulk_work, value))
    # the shared results: the SLA job (and the operator) read them, not the gateway
    unreadable("gateway", RESULTS_TOPIC)
    unreadable("worker", RESULTS_TOPIC)
    # dead letters and the quarantine are the operator's
    for role in ("gateway", "sla", "bulk"):
        unreadable(role, DLQ_TOPIC)
        unreadable(role, QUARANTINE_TOPIC)
    # the SLA job and a bulk run make no interactive requests
    refused(lambda: produce(kafka["sla"], REQUESTS_TOPIC, value))
    refused(lambda: produce(kafka["bulk"], REQUESTS_TOPIC, value))


def test_a_tenant_cannot_take_the_name_of_the_services_reply_topics(stack: Settings) -> None:
    operator = as_role(stack, "operator")
    for name in ("gateway", "bulk"):
        with pytest.raises(TenantError, match="reply topics"):
            add_tenant(operator.kafka, operator.replies, name)


def test_up_writes_one_settings_file_per_role(stack: Settings) -> None:
    for role in ROLES:
        toml_path, env_path = layout.role_settings_files(stack.stack.home, role)
        assert f'sasl_username = "babelstream-{role}"' in toml_path.read_text(encoding="utf-8")
        assert env_path.stat().st_mode & 0o777 == 0o600
