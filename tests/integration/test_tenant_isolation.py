"""Tenants on the secure stack, tried as a hostile tenant would.

One secure single-node stack (its brokers authorize every request), a worker
with ``tenants.identity_from_topic`` on, and tenants made with
``babelstream tenants add``. A tenant's request is served as its tenant on its
own reply topic; one that names another tenant is a dead letter with its
reason and reaches no other tenant; a tenant can read no other tenant's
results, dead letters or quarantine, and write nowhere but its own ingress;
a removed tenant is refused from its next request on.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAuthorizationFailedError
from pydantic import SecretStr

from pipeline.cli.main import main
from pipeline.client import TranslationClient, build_requests
from pipeline.contract.messages import DeadLetter, TranslationResult, now_ms
from pipeline.contract.pairs import (
    DLQ_TOPIC,
    QUARANTINE_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    SLA_TOPIC,
    default_reply_topic,
    tenant_ingress_topic,
    work_topic,
)
from pipeline.kafka.check import KafkaRefused, kafka_python_client
from pipeline.kafka.tenants import add_tenant, list_tenants, remove_tenant
from pipeline.settings import KafkaSettings, Settings
from pipeline.stack import layout
from pipeline.stack.local_worker import DEMO_MODEL, DEMO_PAIR, WorkerProcess
from pipeline.stack.manager import Endpoints
from tests.integration.helpers import TopicTail
from tests.integration.stacks import running_stack

pytestmark = pytest.mark.integration

IDENTITY = {
    "BABELSTREAM_TENANTS__IDENTITY_FROM_TOPIC": "true",
    "BABELSTREAM_TENANTS__INGRESS_DISCOVERY_S": "2",
}
# how long a refused client may take to say so (a denied topic is refused at once)
REFUSAL_S = 20.0


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The secure stack's client settings: the services' user, allowed everything."""
    with running_stack(tmp_path_factory.mktemp("tenants"), brokers=1, secure=True) as stack:
        yield layout.client_settings(stack)


@pytest.fixture(scope="module")
def worker(operator: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    env = {**layout.client_environment(operator), **IDENTITY}
    log_path = tmp_path_factory.mktemp("tenant-worker") / "worker.log"
    process = WorkerProcess(operator, log_path=log_path, env=env).start()
    try:
        yield process
    finally:
        process.stop()


def as_tenant(operator: Settings, tenant: str) -> KafkaSettings:
    """Client settings of a new tenant, made with ``tenants add`` as an operator runs it."""
    runner = CliRunner()
    env = {**layout.client_environment(operator)}
    done = runner.invoke(main, ["tenants", "add", tenant, "--json"], env=env)
    assert done.exit_code == 0, done.output
    made = json.loads(done.stdout)
    assert made["ingress_topic"] == tenant_ingress_topic(tenant)
    return operator.kafka.model_copy(
        update={
            "sasl_username": made["sasl_username"],
            "sasl_password": SecretStr(made["sasl_password"]),
        }
    )


@pytest.fixture(scope="module")
def tenants(operator: Settings, worker: WorkerProcess) -> dict[str, KafkaSettings]:
    readiness = worker.readiness()
    assert readiness is not None and readiness["tenant_from"] == "topic", readiness
    return {name: as_tenant(operator, name) for name in ("acme", "globex")}


def request(text: str, **fields: Any) -> tuple[str, bytes]:
    request_id = f"t-{uuid.uuid4().hex[:12]}"
    body = {
        "request_id": request_id,
        "source_lang": DEMO_PAIR.source,
        "target_lang": DEMO_PAIR.target,
        "text": text,
        "submitted_at": now_ms(),
        **fields,
    }
    return request_id, json.dumps(body).encode()


def producer(kafka: KafkaSettings) -> KafkaProducer:
    return kafka_python_client(
        KafkaProducer,
        kafka,
        "tests-tenant",
        acks="all",
        retries=0,
        max_block_ms=int(REFUSAL_S * 1000),
    )


def produce(
    kafka: KafkaSettings, topic: str, value: bytes, headers: list[tuple[str, bytes]] | None = None
) -> None:
    sender = producer(kafka)
    try:
        sender.send(topic, value, headers=headers or []).get(timeout=REFUSAL_S)
    finally:
        sender.close()


def refused(action: Callable[[], object]) -> str:
    """The authorization error ``action`` ends with (it must end with one)."""
    with pytest.raises(KafkaError) as caught:
        action()
    name = type(caught.value).__name__
    assert "Authorization" in name or "Authentication" in name, repr(caught.value)
    return name


def read_all(kafka: KafkaSettings, topic: str) -> list[Any]:
    """Every record of ``topic`` as ``kafka``'s user may read it, from the start."""
    reader = kafka_python_client(
        KafkaConsumer, kafka, "tests-tenant", group_id=None, enable_auto_commit=False
    )
    try:
        partitions = reader.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in partitions]
        reader.assign(tps)
        reader.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for batch in reader.poll(timeout_ms=250).values():
                records.extend(batch)
        return records
    finally:
        reader.close()


def described(kafka: KafkaSettings, topic: str) -> tuple[int, list[str] | None]:
    """(error code, operations the user may do) of ``topic``, as the brokers tell ``kafka``'s
    user in a metadata response."""
    admin = kafka_python_client(KafkaAdminClient, kafka, "tests-tenant")
    try:
        (found,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return found["error_code"], found["authorized_operations"]


def results_of(records: list[Any], request_id: str) -> list[TranslationResult]:
    found = [TranslationResult.model_validate_json(r.value) for r in records]
    return [r for r in found if r.request_id == request_id]


def replies_to(
    kafka: KafkaSettings, topic: str, request_id: str, timeout_s: float = 120.0
) -> list[TranslationResult]:
    """The results of ``request_id`` on ``topic``, read as ``kafka``'s user, once there are any
    (none after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := results_of(read_all(kafka, topic), request_id):
            return found
    return []


def test_a_tenants_request_is_served_as_its_tenant_on_its_own_reply_topic(
    operator: Settings, tenants: dict[str, KafkaSettings]
) -> None:
    reply_topic = default_reply_topic(operator.replies.prefix, "acme")
    shared = TopicTail(operator.kafka, RESULTS_TOPIC)
    ingress = TopicTail(operator.kafka, REQUESTS_TOPIC)
    request_id, value = request("Hello, tenant.")
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    traceparent = f"00-{trace_id}-{parent}-01".encode()
    produce(tenants["acme"], tenant_ingress_topic("acme"), value, [("traceparent", traceparent)])

    # the tenant reads it with its own user
    (result,) = replies_to(tenants["acme"], reply_topic, request_id)
    _, allowed = described(tenants["acme"], reply_topic)
    assert sorted(allowed or []) == ["CREATE", "DELETE", "DESCRIBE", "READ"]
    assert (result.status, result.tenant) == ("ok", "acme"), result
    assert result.translation
    shared_copy = results_of(
        shared.read_until(lambda rs: bool(results_of(rs, request_id))), request_id
    )
    assert [r.tenant for r in shared_copy] == ["acme"]  # the SLA job sees it as acme's
    # the trace goes on through the gate (with no exporter its admit span records nothing,
    # so the parent it hands on is the producer's)
    (forwarded,) = [
        r
        for r in ingress.read_until(lambda rs: any(request_id.encode() in r.value for r in rs))
        if request_id.encode() in r.value
    ]
    _, sent_trace, _, _ = dict(forwarded.headers)["traceparent"].decode().split("-")
    assert sent_trace == trace_id


def cancels_known(worker: WorkerProcess) -> float:
    """The worker's ``babelstream_cancels_known`` (live cancels it has read)."""
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    (value,) = re.findall(r"^babelstream_cancels_known (\S+)$", text, re.M)
    return float(value)


def test_a_tenants_cancel_covers_its_own_request_and_not_anothers_of_that_id(
    operator: Settings, tenants: dict[str, KafkaSettings], worker: WorkerProcess
) -> None:
    request_id = f"t-{uuid.uuid4().hex[:12]}"
    before = cancels_known(worker)
    # written to its own ingress, as its requests are: it covers requests submitted until
    # cancelled_at, so it is read before the request it cancels is sent
    cancel = {"request_id": request_id, "cancelled_at": now_ms() + 600_000}
    produce(tenants["acme"], tenant_ingress_topic("acme"), json.dumps(cancel).encode())
    deadline = time.monotonic() + 60
    while cancels_known(worker) < before + 1:
        assert time.monotonic() < deadline, "the worker never read the tenant's cancel"
        time.sleep(0.25)
    for tenant in ("acme", "globex"):
        _, value = request(f"Cancelled for {tenant}?", request_id=request_id)
        produce(tenants[tenant], tenant_ingress_topic(tenant), value)
    prefix = operator.replies.prefix
    (mine,) = replies_to(tenants["acme"], default_reply_topic(prefix, "acme"), request_id)
    (theirs,) = replies_to(tenants["globex"], default_reply_topic(prefix, "globex"), request_id)
    assert (mine.status, mine.tenant) == ("cancelled", "acme"), mine
    assert (theirs.status, theirs.tenant) == ("ok", "globex"), theirs


def test_a_request_naming_another_tenant_is_a_dead_letter_and_reaches_no_one_else(
    operator: Settings, tenants: dict[str, KafkaSettings]
) -> None:
    globex_replies = default_reply_topic(operator.replies.prefix, "globex")
    dead_letters = TopicTail(operator.kafka, DLQ_TOPIC)
    theirs = TopicTail(operator.kafka, globex_replies)
    request_id, value = request("Spend globex's quota.", tenant="globex", reply_to=globex_replies)
    produce(tenants["acme"], tenant_ingress_topic("acme"), value)

    def mine(records: list[Any]) -> list[DeadLetter]:
        letters = [DeadLetter.model_validate_json(r.value) for r in records]
        return [d for d in letters if d.value and request_id in d.value]

    (letter,) = mine(dead_letters.read_until(lambda rs: bool(mine(rs))))
    assert letter.reason == "tenant_mismatch" and letter.source_topic == "translate.ingress.acme"
    # acme hears why on its own reply topic, as acme
    own = default_reply_topic(operator.replies.prefix, "acme")
    told = replies_to(tenants["acme"], own, request_id, timeout_s=60)
    assert [(r.status, r.reason, r.tenant) for r in told] == [("error", "tenant_mismatch", "acme")]
    assert results_of(theirs.drain(), request_id) == []  # nothing of it reached globex


def test_the_projects_client_and_commands_run_as_a_tenant(
    operator: Settings, worker: WorkerProcess
) -> None:
    # the variables `tenants add` prints are all a tenant's client needs beside the brokers
    made = CliRunner().invoke(
        main, ["tenants", "add", "initech"], env=layout.client_environment(operator)
    )
    assert made.exit_code == 0, made.output
    printed = dict(line.split("=", 1) for line in made.stdout.splitlines())
    assert printed["BABELSTREAM_TENANTS__CLIENT_TENANT"] == "initech"
    env = {**layout.client_environment(operator), **printed}
    kafka = operator.kafka.model_copy(
        update={
            "sasl_username": printed["BABELSTREAM_KAFKA__SASL_USERNAME"],
            "sasl_password": SecretStr(printed["BABELSTREAM_KAFKA__SASL_PASSWORD"]),
        }
    )
    # TranslationClient: the tenant's ingress, and a reply topic under its own prefix
    with TranslationClient(kafka, replies=operator.replies, tenant="initech") as client:
        assert client.ingress == tenant_ingress_topic("initech")
        replies = client.translate(build_requests(["Hello, initech."], DEMO_PAIR), timeout_s=90)
    (result,) = replies.ordered
    assert result is not None and (result.status, result.tenant) == ("ok", "initech"), result

    def cli(*args: str) -> Any:
        return CliRunner().invoke(main, list(args), env=env)

    pair = ["--src", DEMO_PAIR.source, "--tgt", DEMO_PAIR.target]
    said = cli("translate", *pair, "Hello from initech's shell.", "--json", "--timeout", "60s")
    assert said.exit_code == 0, said.output
    shown = TranslationResult.model_validate_json(said.stdout.strip())
    assert (shown.status, shown.tenant) == ("ok", "initech")
    # submit, then results: read from the tenant's default reply topic, not translate.results
    submitted = cli("submit", *pair, "Fetched later by initech.")
    assert submitted.exit_code == 0, submitted.output
    request_id = submitted.stdout.strip()
    fetched = cli("results", request_id, "--wait", "60s", "--json")
    assert fetched.exit_code == 0, fetched.output
    assert TranslationResult.model_validate_json(fetched.stdout.strip()).tenant == "initech"
    # naming another tenant is refused before anything is sent
    other = cli("submit", *pair, "--tenant", "globex", "Spend globex's quota.")
    assert other.exit_code == 2
    assert "names tenant 'globex', but this client is tenant 'initech''s" in other.output


@pytest.mark.parametrize(
    "topic",
    [
        RESULTS_TOPIC,
        DLQ_TOPIC,
        QUARANTINE_TOPIC,
        SLA_TOPIC,
        "translate.replies.globex.results",
        "translate.ingress.globex",
    ],
)
def test_a_tenant_reads_nothing_of_anothers_or_the_shared_topics(
    operator: Settings, tenants: dict[str, KafkaSettings], topic: str
) -> None:
    assert described(operator.kafka, topic)[0] == 0  # the topic is there
    # the brokers answer the tenant as if it were not: kafka-python's consumer then reads
    # nothing and says nothing, so the metadata's own answer is checked too
    assert described(tenants["acme"], topic) == (TopicAuthorizationFailedError.errno, None)
    assert read_all(tenants["acme"], topic) == []


@pytest.mark.parametrize(
    "topic",
    [
        REQUESTS_TOPIC,
        RESULTS_TOPIC,
        SLA_TOPIC,
        DLQ_TOPIC,
        work_topic(DEMO_MODEL),
        "translate.ingress.globex",
        "translate.replies.globex.results",
    ],
)
def test_a_tenant_writes_nowhere_but_its_own_ingress(
    operator: Settings, tenants: dict[str, KafkaSettings], topic: str
) -> None:
    _, value = request("Written where it may not be.", tenant="globex")
    refused(lambda: produce(tenants["acme"], topic, value))


def test_a_removed_tenant_is_refused_from_its_next_request(
    operator: Settings, tenants: dict[str, KafkaSettings]
) -> None:
    initech = as_tenant(operator, "initech")
    assert "initech" in list_tenants(operator.kafka)
    ingress = tenant_ingress_topic("initech")
    sender = producer(initech)
    try:
        sender.send(ingress, request("Before.")[1]).get(timeout=REFUSAL_S)
        remove_tenant(operator.kafka, "initech")
        # the connection it already has is refused too: ACLs are checked on every request
        refused(lambda: sender.send(ingress, request("After.")[1]).get(timeout=REFUSAL_S))
    finally:
        sender.close(timeout=1)
    assert "initech" not in list_tenants(operator.kafka)
    # and its user is gone: a new connection is not let in
    with pytest.raises(KafkaRefused, match="refused the SASL login of user 'tenant-initech'"):
        produce(initech, tenant_ingress_topic("initech"), request("Again.")[1])


def test_adding_a_tenant_again_gives_it_a_new_password(operator: Settings) -> None:
    first = as_tenant(operator, "umbrella")
    produce(first, tenant_ingress_topic("umbrella"), request("With the first password.")[1])
    second = as_tenant(operator, "umbrella")
    assert second.sasl_password != first.sasl_password
    produce(second, tenant_ingress_topic("umbrella"), request("With the second.")[1])
    with pytest.raises(KafkaRefused, match="refused the SASL login of user 'tenant-umbrella'"):
        produce(first, tenant_ingress_topic("umbrella"), request("With the first again.")[1])
    remove_tenant(operator.kafka, "umbrella")


def test_tenants_need_a_secured_cluster(stack: Endpoints) -> None:
    """On the plain dev stack, ``tenants add`` says so in one line and makes nothing."""
    settings = stack.settings
    env = {"BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers}
    done = CliRunner().invoke(main, ["tenants", "add", "acme"], env=env)
    assert done.exit_code != 0
    assert "no authorizer" in done.output and "Traceback" not in done.output
    with pytest.raises(Exception, match="no authorizer"):
        add_tenant(settings.kafka, settings.replies, "acme")
