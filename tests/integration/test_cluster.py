"""A 3-node KRaft cluster from ``babelstream up --brokers 3``: replication, one node lost, down.

The cluster runs in a temporary stack home on free ports of its own, beside
the session's single-node stack.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType

from pipeline.cli.status import topics
from pipeline.client import reliable_producer
from pipeline.engine.registry import registry_models
from pipeline.kafka.check import admin_client, kafka_python_client
from pipeline.kafka.topics import TopicSpec, ensure_topics, topic_specs
from pipeline.settings import Settings
from pipeline.stack import layout, manager
from pipeline.stack.procs import PidFile, is_alive
from tests.integration.stacks import running_stack

pytestmark = pytest.mark.integration

RECORDS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    with running_stack(tmp_path_factory.mktemp("cluster"), brokers=3, secure=False) as settings:
        yield settings


def _pidfile(settings: Settings, name: str) -> PidFile:
    return PidFile(settings.stack.home / "run" / f"{name}.pid")


def _partitions(settings: Settings, topics: list[str]) -> dict[str, list[dict[str, object]]]:
    admin = admin_client(layout.client_settings(settings).kafka, "tests")
    try:
        return {t["name"]: t["partitions"] for t in admin.describe_topics(topics)}
    finally:
        admin.close()


def _led_partitions(
    settings: Settings, topics: list[str], timeout_s: float = 30.0
) -> dict[str, list[dict[str, object]]]:
    """Each topic's partitions, once the node answering knows every partition's leader.

    ``up`` waits until one node reports the new topics; a KRaft broker applies the
    metadata log on its own, so the node a later client asks may lag behind it.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        described = _partitions(settings, topics)
        lagging = [
            name
            for name in topics
            if not described.get(name) or any(p["leader_id"] < 0 for p in described[name])  # type: ignore[operator]
        ]
        if not lagging:
            return described
        assert time.monotonic() < deadline, f"no leaders for {lagging}: {described}"
        time.sleep(0.5)


def _leader_of_first_partition(settings: Settings, topic: str) -> int:
    """Partition 0's leader, once the node answering knows the topic."""
    partitions = _led_partitions(settings, [topic])[topic]
    return int(next(p["leader_id"] for p in partitions if p["partition_index"] == 0))  # type: ignore[call-overload]


def test_status_lists_every_node(cluster: Settings) -> None:
    statuses = manager.status(cluster)
    assert [s.name for s in statuses] == ["kafka-1", "kafka-2", "kafka-3", "redis"]
    assert all(s.healthy and s.pid for s in statuses), statuses
    assert len({s.address for s in statuses}) == 4
    assert all("3 broker(s)" in s.detail for s in statuses[:3])


def test_project_topics_have_three_replicas_and_min_isr_two(cluster: Settings) -> None:
    kafka = layout.client_settings(cluster).kafka
    assert (kafka.replication_factor, kafka.min_insync_replicas) == (3, 2)
    clients = layout.client_settings(cluster)
    specs = topic_specs(clients, registry_models(clients.engine.registry))
    described = _led_partitions(cluster, list(specs))
    for name, partitions in described.items():
        assert len(partitions) == specs[name].partitions, name
        for partition in partitions:
            assert sorted(partition["replica_nodes"]) == [1, 2, 3], (name, partition)  # type: ignore[type-var]
            assert sorted(partition["isr_nodes"]) == [1, 2, 3], (name, partition)  # type: ignore[type-var]
    admin = admin_client(kafka, "tests")
    try:
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in specs]
        )["topic"]
    finally:
        admin.close()
    assert {name: configs[name]["min.insync.replicas"]["value"] for name in specs} == {
        name: "2" for name in specs
    }


def test_settings_below_the_cluster_are_refused_and_shown(
    cluster: Settings, tmp_path: Path
) -> None:
    """A worker started with the cluster's address alone (replication 1, min ISR 1) refuses
    to create its topics, in one line; a topic created with one replica anyway shows in
    `status` as under-replicated."""
    clients = layout.client_settings(cluster)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BABELSTREAM_")}
    env.update(
        {
            "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": clients.kafka.bootstrap_servers,
            "BABELSTREAM_WORKER__WEB_PORT": "0",
            "BABELSTREAM_WORKER__DATA_DIR": str(tmp_path / "faust"),
            "BABELSTREAM_OBSERVABILITY__METRICS_PORT": "0",
            "BABELSTREAM_ENGINE__PROFILE": "false",
        }
    )
    program = Path(sys.executable).with_name("babelstream")
    done = subprocess.run(
        [str(program), "worker", "--pairs", "en_en-XA", "--no-router"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "3 brokers with default.replication.factor 3 and min.insync.replicas 2" in lines[0]
    assert "BABELSTREAM_KAFKA__REPLICATION_FACTOR=3" in lines[0], lines[0]
    admin = admin_client(clients.kafka, "tests")
    name = f"translate.test-under.{uuid.uuid4().hex[:8]}"
    try:
        created = [t["name"] for t in admin.describe_topics()]
        assert not [t for t in created if t.endswith("-changelog")], created
        admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
        # the node status asks may apply the new topic a little after the controller
        deadline = time.monotonic() + 30
        while name not in (status := topics(clients)).info["under_replicated"]:
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
    finally:
        admin.delete_topics([name])
        admin.close()
    assert status.state == "UNDER-REPLICATED", status
    assert status.info["under_replicated"] == {name: "1 replica of 3"}, status


def test_produce_and_consume_with_one_node_killed(cluster: Settings) -> None:
    """SIGKILL the leader of the topic's partition 0; acks=all writes and reads go on."""
    kafka = layout.client_settings(cluster).kafka
    topic = f"test.cluster.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: TopicSpec(3)})
    leader = _leader_of_first_partition(cluster, topic)
    record = _pidfile(cluster, f"kafka-{leader}").read()
    assert record is not None and is_alive(record)
    os.kill(record.pid, signal.SIGKILL)

    producer = reliable_producer(kafka, "tests")
    sent = {f"k{i}".encode(): f"v{i}".encode() for i in range(RECORDS)}
    futures = [producer.send(topic, key=k, value=v) for k, v in sent.items()]
    producer.flush(timeout=120)
    assert all(future.get(timeout=120) for future in futures)  # acknowledged by 2 of 3 replicas
    producer.close()

    consumer = kafka_python_client(
        KafkaConsumer,
        kafka,
        "tests",
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=60_000,
    )
    consumer.subscribe([topic])
    got: dict[bytes, bytes] = {}
    for message in consumer:
        got[message.key] = message.value
        if len(got) == RECORDS:
            break
    consumer.commit()  # the group's offsets land in __consumer_offsets (3 replicas)
    consumer.close()
    assert got == sent

    statuses = {s.name: s for s in manager.status(cluster)}
    assert not statuses[f"kafka-{leader}"].healthy
    assert all(s.healthy for name, s in statuses.items() if name != f"kafka-{leader}")
    offsets = _partitions(cluster, ["__consumer_offsets"])["__consumer_offsets"]
    assert all(len(p["replica_nodes"]) == 3 for p in offsets)  # type: ignore[arg-type]
    assert _leader_of_first_partition(cluster, topic) != leader


def test_down_stops_every_node(cluster: Settings) -> None:
    names = ("kafka-1", "kafka-2", "kafka-3", "redis")
    records = [_pidfile(cluster, name).read() for name in names]
    manager.down(cluster)
    assert not any(record is not None and is_alive(record) for record in records)
    assert not list((cluster.stack.home / "run").glob("*.pid"))
    assert not (Path(cluster.stack.home) / "run" / "stack.json").exists()
