"""``babelstream up --secure``: every client type through SASL_SSL / mutual TLS, Redis over TLS.

One secure single-node stack in a temporary home on free ports: kafka-python,
aiokafka, a minimal Faust app, Spark's Kafka source and sink and the Redis
cache round-trip through it; a wrong password, a plaintext client and a
mutual-TLS client without its certificate are refused with one-line reasons
and move nothing; no secret shows in any log or in ``status --json``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer
from pydantic import SecretStr

from pipeline.client import reliable_producer
from pipeline.kafka.check import KafkaRefused, admin_client, kafka_python_client
from pipeline.kafka.clients import aiokafka_options
from pipeline.kafka.reachability import require_kafka
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import PROJECT_ROOT, KafkaSettings, Settings
from pipeline.stack import layout
from pipeline.stack.secure import load_secrets
from pipeline.storage.cache import CachedTranslation, RedisCache
from pipeline.storage.redis_client import redis_client
from tests.integration.helpers import TopicTail, spark_kafka_round_trip
from tests.integration.stacks import running_stack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

N = 10
FAST_FAIL = {"bootstrap_timeout_ms": 5000}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def logs() -> Iterator[_Collect]:
    """Every log record of this module's tests, at DEBUG (the secret check reads them)."""
    handler, root = _Collect(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, logs: _Collect) -> Iterator[Settings]:
    with running_stack(tmp_path_factory.mktemp("secure"), brokers=1, secure=True) as settings:
        yield settings


@pytest.fixture(scope="module")
def clients(secure: Settings) -> Settings:
    return layout.client_settings(secure)


def _topic(kafka: KafkaSettings, partitions: int = 1) -> str:
    name = f"test.secure.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {name: TopicSpec(partitions)})
    return name


def _messages(tag: str) -> dict[bytes, bytes]:
    return {f"k{i}".encode(): f"{tag} {i} ✓".encode() for i in range(N)}


def _produce(kafka: KafkaSettings, topic: str, sent: dict[bytes, bytes]) -> None:
    producer = reliable_producer(kafka, "tests")
    for key, value in sent.items():
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _read_all(kafka: KafkaSettings, topic: str) -> dict[bytes, bytes]:
    tail = kafka_python_client(
        KafkaConsumer,
        kafka,
        "tests",
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    tail.subscribe([topic])
    got = {message.key: message.value for message in tail}
    tail.close()
    return got


def test_status_shows_a_secure_stack(secure: Settings) -> None:
    """``babelstream status --json`` (the CLI, as a user runs it) reports it without secrets."""
    stack = secure.stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("BABELSTREAM_")}
    env.update(
        {
            "BABELSTREAM_STACK__HOME": str(stack.home),
            "BABELSTREAM_STACK__JARS_DIR": str(stack.jars_dir),
            "BABELSTREAM_STACK__KAFKA_PORT": str(stack.kafka_port),
            "BABELSTREAM_STACK__KAFKA_CONTROLLER_PORT": str(stack.kafka_controller_port),
            "BABELSTREAM_STACK__KAFKA_SSL_PORT": str(stack.kafka_ssl_port),
            "BABELSTREAM_STACK__REDIS_PORT": str(stack.redis_port),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["healthy"], status
    kafka, redis_status = status["services"]
    assert "SASL_SSL" in kafka["detail"] and "TLS, ACL user" in redis_status["detail"]
    (stack.home / "log" / "status.json").write_text(done.stdout + done.stderr)


def test_kafka_python_round_trip_over_sasl_ssl(clients: Settings) -> None:
    kafka = clients.kafka
    assert kafka.security_protocol == "SASL_SSL" and kafka.sasl_mechanism == "SCRAM-SHA-512"
    topic, sent = _topic(kafka), _messages("kafka-python")
    _produce(kafka, topic, sent)
    assert _read_all(kafka, topic) == sent


def test_kafka_python_round_trip_over_mutual_tls(secure: Settings) -> None:
    kafka = layout.client_settings(secure, mutual_tls=True).kafka
    assert kafka.security_protocol == "SSL" and kafka.ssl_certfile is not None
    topic, sent = _topic(kafka), _messages("mutual TLS")
    _produce(kafka, topic, sent)
    assert _read_all(kafka, topic) == sent


def test_aiokafka_round_trip_over_sasl_ssl(clients: Settings) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    kafka = clients.kafka
    topic, sent = _topic(kafka), _messages("aiokafka")

    async def run() -> dict[bytes, bytes]:
        producer = AIOKafkaProducer(**aiokafka_options(kafka, "tests"), acks="all")
        await producer.start()
        try:
            for key, value in sent.items():
                await producer.send(topic, key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            **aiokafka_options(kafka, "tests"),
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: dict[bytes, bytes] = {}
        try:
            async with asyncio.timeout(60):
                async for record in consumer:
                    got[record.key] = record.value
                    if len(got) == N:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == sent


def test_faust_app_consumes_and_produces_over_sasl_ssl(
    secure: Settings, clients: Settings, tmp_path: Path
) -> None:
    kafka = clients.kafka
    source, sink = _topic(kafka), _topic(kafka)
    tail = TopicTail(kafka, sink)
    _produce(kafka, source, {b"hello": b"secure faust"})
    toml_path, _ = layout.settings_files(secure.stack.home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BABELSTREAM_")}
    env.update(
        BABELSTREAM_CONFIG=str(toml_path),
        ECHO_APP_ID=f"echo-{uuid.uuid4().hex[:8]}",
        ECHO_IN=source,
        ECHO_OUT=sink,
        ECHO_DATADIR=str(tmp_path / "faust"),
    )
    log_path = secure.stack.home / "log" / "faust-echo.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                str(PROJECT_ROOT / "tests/integration/faust_echo.py"),
                "worker",
                "--without-web",
                "--loglevel",
                "info",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        records = tail.read_until(lambda got: len(got) >= 1, timeout_s=120)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        tail.close()
    assert [(r.key, r.value) for r in records] == [(b"hello", b"tsuaf eruces")], log_path.read_text(
        errors="replace"
    )[-3000:]


def test_spark_source_and_sink_over_sasl_ssl(clients: Settings, spark: SparkSession) -> None:
    kafka = clients.kafka
    topic, sent = _topic(kafka), {k.decode(): v.decode() for k, v in _messages("spark").items()}
    assert spark_kafka_round_trip(spark, kafka, topic, sent) == sent


def test_redis_cache_over_tls_as_the_acl_user(clients: Settings) -> None:
    settings = clients.redis
    assert settings.uses_tls and settings.username and settings.password
    cache = RedisCache(settings)
    entry = CachedTranslation("Ĥéļļö", "demo", 2, 3)
    digest = uuid.uuid4().hex
    cache.put_many({digest: entry})
    assert cache.get_many([digest]) == {digest: entry}
    assert cache.errors == 0
    cache.close()


def test_the_redis_user_cannot_wipe_scan_or_reconfigure_the_store(clients: Settings) -> None:
    client = redis_client(clients.redis)
    try:
        key = f"test:{uuid.uuid4().hex}"
        client.set(key, "kept")
        for command in (("FLUSHALL",), ("FLUSHDB",), ("KEYS", "*"), ("CONFIG", "GET", "*")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command(*command)
        assert client.get(key) == b"kept"  # nothing was flushed
        assert client.info("server")["redis_version"]  # the health check's command
    finally:
        client.close()


def test_redis_refuses_wrong_password_and_plaintext(clients: Settings) -> None:
    good = clients.redis
    wrong = good.model_copy(update={"password": SecretStr("not-the-password")})
    client = redis_client(wrong)
    with pytest.raises(redis.AuthenticationError):
        client.ping()
    client.close()
    plaintext = good.model_copy(
        update={"url": good.url.replace("rediss://", "redis://"), "ssl_ca_certs": None}
    )
    client = redis_client(plaintext)
    with pytest.raises(redis.ConnectionError):
        client.ping()
    client.close()
    # the cache degrades to misses and stores nothing with the wrong password
    cache, digest = RedisCache(wrong), uuid.uuid4().hex
    cache.put_many({digest: CachedTranslation("x", "demo", 1, 1)})
    assert cache.errors == 1
    cache.close()
    check = RedisCache(good)
    assert check.get_many([digest]) == {}
    check.close()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("wrong password", r"refused the SASL login of user 'babelstream' \(SCRAM-SHA-512\)"),
        ("no TLS", r"speaks TLS but kafka.security_protocol is PLAINTEXT"),
        ("no client certificate", r"closed the Kafka handshake.*kafka.ssl_certfile"),
        ("untrusted", r"certificate this client does not trust"),
    ],
)
def test_kafka_refuses_bad_clients_with_a_clear_reason(
    secure: Settings, clients: Settings, case: str, reason: str
) -> None:
    good = clients.kafka
    bad = {
        "wrong password": good.model_copy(update={"sasl_password": SecretStr("wrong")}),
        "no TLS": good.model_copy(update={"security_protocol": "PLAINTEXT"}),
        "no client certificate": layout.client_settings(secure, mutual_tls=True).kafka.model_copy(
            update={"ssl_certfile": None}
        ),
        "untrusted": good.model_copy(update={"ssl_cafile": None}),
    }[case]
    topic = _topic(good)
    with pytest.raises(KafkaRefused, match=reason):
        producer = kafka_python_client(KafkaProducer, bad, "tests", **FAST_FAIL)
        producer.send(topic, b"must not arrive").get(timeout=10)
    group = f"g-{topic}"
    with pytest.raises(KafkaRefused, match=reason):
        consumer = kafka_python_client(
            KafkaConsumer, bad, "tests", group_id=group, auto_offset_reset="earliest", **FAST_FAIL
        )
        consumer.subscribe([topic])
        consumer.poll(timeout_ms=5000)
    assert _read_all(good, topic) == {}  # nothing was produced
    admin = admin_client(good, "tests")
    try:
        assert group not in {g["group_id"] for g in admin.list_groups()}  # nothing consumed
    finally:
        admin.close()


@pytest.mark.parametrize(
    "args",
    [["translate", "--src", "en", "--tgt", "en-XA", "Hello"], ["worker", "--router-only"]],
    ids=["translate", "worker"],
)
def test_a_command_without_the_secure_settings_says_so_at_once(
    secure: Settings, args: list[str], tmp_path: Path
) -> None:
    """The stack's address without `source var/stack/settings.env`: one line naming the
    fix at the first refused handshake (exit 2), no client retrying and logging meanwhile."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BABELSTREAM_")}
    env.update(
        {
            "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{secure.stack.kafka_port}",
            "BABELSTREAM_WORKER__WEB_PORT": "0",
            "BABELSTREAM_WORKER__DATA_DIR": str(tmp_path / "faust"),
            "BABELSTREAM_OBSERVABILITY__METRICS_PORT": "0",
        }
    )
    program = Path(sys.executable).with_name("babelstream")
    done = subprocess.run(
        [str(program), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "speaks TLS but kafka.security_protocol is PLAINTEXT" in lines[0], lines[0]
    assert "`source var/stack/settings.env`" in lines[0], lines[0]


def test_a_tls_client_without_sasl_is_told_the_listener_wants_a_login(clients: Settings) -> None:
    no_sasl = clients.kafka.model_copy(update={"security_protocol": "SSL"})
    with pytest.raises(
        KafkaRefused, match=r"wants a SASL login; set kafka.security_protocol to SASL_SSL"
    ):
        require_kafka(no_sasl)
    require_kafka(clients.kafka)  # the stack's own settings pass


def test_aiokafka_refuses_a_wrong_password(clients: Settings) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaConnectionError

    bad = clients.kafka.model_copy(update={"sasl_password": SecretStr("wrong")})

    async def run() -> None:
        consumer = AIOKafkaConsumer(**aiokafka_options(bad, "tests"))
        try:
            await consumer.start()
        finally:
            await consumer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(run())


def test_no_secret_in_logs_or_status(secure: Settings, logs: _Collect) -> None:
    """Runs last: everything the tests above logged, the stack's logs, the status output."""
    stack_secrets = load_secrets(secure.stack.home)
    secrets_ = [
        stack_secrets.kafka_password.get_secret_value(),
        stack_secrets.redis_password.get_secret_value(),
    ]
    files = sorted((secure.stack.home / "log").glob("*"))
    assert {"kafka.log", "redis.log", "faust-echo.log", "status.json"} <= {f.name for f in files}
    texts = {str(f): f.read_text(errors="replace") for f in files}
    texts["python logging"] = "\n".join(logs.lines)
    assert len(logs.lines) > 100  # DEBUG records of the clients above were collected
    for where, text in texts.items():
        for secret in secrets_:
            assert secret not in text, f"a secret appears in {where}"
