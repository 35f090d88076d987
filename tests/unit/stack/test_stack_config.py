"""Rendering of the stack's config files and the topic list (no services needed)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from pipeline.engine.registry import registry_models
from pipeline.kafka.topics import topic_specs
from pipeline.maven import artifact_id
from pipeline.settings import (
    EngineSettings,
    KafkaSettings,
    LimitSettings,
    Settings,
    StackSettings,
)
from pipeline.stack.kafka import cluster_id, render_server_properties
from pipeline.stack.layout import node_ports
from pipeline.stack.redis_server import render_redis_conf


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_server_properties_single_kraft_node() -> None:
    settings = Settings(stack=StackSettings(kafka_port=19092, kafka_controller_port=19093))
    (node,) = node_ports(settings.stack)
    props = _props(render_server_properties(settings, node, Path("/data/kafka")))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"{props['node.id']}@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == "/data/kafka"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        assert props[key] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    assert props["num.partitions"] == "4"


def test_cluster_id_is_kafka_uuid_format() -> None:
    cid = cluster_id("/var/babelstream:3:plaintext")
    assert len(cid) == 22 and "=" not in cid
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    # every node of one cluster gets the same id; another layout another one
    assert cluster_id("/var/babelstream:3:plaintext") == cid
    assert cluster_id("/var/babelstream:3:secure") != cid


def test_cluster_id_never_reads_as_an_option() -> None:
    # about 1 seed in 64 hashes to an id that starts with '-', which
    # kafka-storage's parser takes for a flag ("expected one argument")
    ids = [cluster_id(f"/tmp/pytest-of-root/pytest-{n}/cluster0:3:plaintext") for n in range(2000)]
    assert not [cid for cid in ids if cid.startswith("-")]
    assert len(set(ids)) == len(ids)


def test_redis_conf_foreground_loopback_with_marker(tmp_path: Path) -> None:
    conf = render_redis_conf(16379, tmp_path / "data", tmp_path / "redis.conf")
    lines = conf.splitlines()
    assert "port 16379" in lines and "bind 127.0.0.1" in lines
    assert "daemonize no" in lines
    assert f"dir {tmp_path / 'data'}" in lines
    assert any(
        line.startswith("proc-title-template") and str(tmp_path / "redis.conf") in line
        for line in lines
    )


def test_topic_specs_cover_the_design(tmp_path: Path) -> None:
    registry = tmp_path / "registry.toml"
    registry.write_text(
        "".join(
            f'[[pair]]\nid = "{pair}"\nmodel = "{model}"\ntokenizer = "spm.model"\n'
            for pair, model in (("en_de", "opus-mt-en-de"), ("en_fr", "m2m"), ("de_fr", "m2m"))
        )
    )
    settings = Settings(
        kafka=KafkaSettings(ingress_partitions=6, work_partitions=3),
        engine=EngineSettings(registry=registry),
    )
    models = registry_models(registry)
    specs = {name: spec.partitions for name, spec in topic_specs(settings, models).items()}
    assert specs == {
        "translate.requests": 6,
        "translate.results": settings.kafka.results_partitions,
        "translate.dlq": settings.kafka.dlq_partitions,
        "translate.sla": settings.kafka.sla_partitions,
        "translate.sla.late": settings.kafka.sla_late_partitions,
        "translate.ticks": settings.kafka.ticks_partitions,
        # work topics per model, not per pair
        "translate.work.opus-mt-en-de": 3,
        "translate.work-bulk.opus-mt-en-de": 3,
        "translate.work.m2m": 3,
        "translate.work-bulk.m2m": 3,
        "translate.cancel": settings.kafka.cancel_partitions,
        "translate.dlq.replayed": settings.kafka.replay_marker_partitions,
        "translate.quarantine": settings.kafka.quarantine_partitions,
    }


def test_control_topics_are_compacted_and_cancels_expire_with_the_longest_deadline() -> None:
    settings = Settings(limits=LimitSettings(max_timeout_ms=600_000))
    specs = topic_specs(settings)
    cancel = specs["translate.cancel"].config
    assert cancel["cleanup.policy"] == "compact,delete"
    assert cancel["retention.ms"] == "600000"
    assert specs["translate.dlq.replayed"].config == {"cleanup.policy": "compact"}
    assert specs["translate.quarantine"].config == {"cleanup.policy": "compact"}


def test_ticks_topic_keeps_heartbeats_briefly() -> None:
    settings = Settings(kafka=KafkaSettings(ticks_retention_ms=120_000))
    assert topic_specs(settings)["translate.ticks"].config == {"retention.ms": "120000"}


@pytest.mark.parametrize(
    ("jar", "artifact"),
    [
        ("kafka-clients-3.9.1.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.13-4.1.1.jar", "spark-sql-kafka-0-10_2.13"),
        (
            "netty-transport-native-epoll-4.1.118.Final-linux-x86_64.jar",
            "netty-transport-native-epoll",
        ),
        ("scala-library-2.13.17.jar", "scala-library"),
        ("HikariCP-2.5.1.jar", "HikariCP"),
        ("hive-shims-0.23-2.3.10.jar", "hive-shims-0.23"),
        ("log4j-1.2-api-2.24.3.jar", "log4j-1.2-api"),
        ("zstd-jni-1.5.7-6.jar", "zstd-jni"),
        ("kafka_2.13-3.9.1.jar", "kafka_2.13"),
    ],
)
def test_artifact_id_from_jar_name(jar: str, artifact: str) -> None:
    assert artifact_id(jar) == artifact


def test_spark_cluster_daemons_bind_to_the_configured_host_and_ports(tmp_path: Path) -> None:
    from pipeline.settings import SparkClusterSettings
    from pipeline.stack.spark import spark_home, spark_services

    settings = Settings(
        stack=StackSettings(home=tmp_path),
        spark=SparkClusterSettings(
            master_port=17077,
            master_webui_port=18080,
            worker_port=17078,
            worker_webui_port=18081,
            workers=2,
            worker_cores=1,
        ),
    )
    master, *workers = spark_services(settings)
    assert [s.name for s in (master, *workers)] == [
        "spark-master",
        "spark-worker-0",
        "spark-worker-1",
    ]
    command = master.command()
    assert command[0] == "env" and f"{spark_home()}/bin/spark-class" in command
    assert (
        "SPARK_LOCAL_IP=127.0.0.1" in command
        and f"SPARK_DAEMON_JAVA_OPTS={master.marker}" in command
    )
    assert command[-6:] == ["--host", "127.0.0.1", "--port", "17077", "--webui-port", "18080"]
    worker = workers[1].command()
    assert worker[-1] == "spark://127.0.0.1:17077"
    assert worker[worker.index("--port") + 1] == "17079"
    assert worker[worker.index("--webui-port") + 1] == "18082"
    assert workers[1].address == "127.0.0.1:17079"
    assert len({s.marker for s in (master, *workers)}) == 3, "each daemon recognisable"
    assert all(str(tmp_path) in s.marker for s in (master, *workers))
