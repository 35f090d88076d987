"""Single-node Apache Kafka in KRaft mode (combined broker + controller)."""

from __future__ import annotations

import base64
import logging
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.errors import StackError
from pipeline.settings import Settings
from pipeline.stack.jars import kafka_jars
from pipeline.stack.procs import cmdline
from pipeline.stack.service import Probe, Reporter, Service

HOST = "127.0.0.1"
_JAR_VERSION = re.compile(r"kafka_2\.13-([^/:\s]+?)\.jar")

LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
log4j.logger.org.apache.kafka.storage.internals.log=WARN
"""


def render_server_properties(settings: Settings, log_dir: Path) -> str:
    """``server.properties`` for one combined broker+controller node, tuned for tests."""
    stack = settings.stack
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{stack.kafka_controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{stack.kafka_port},"
                     f"CONTROLLER://{HOST}:{stack.kafka_controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{stack.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "4",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "log.retention.hours": "24",
    }
    return "".join(f"{key}={value}\n" for key, value in props.items())


@contextmanager
def _quiet_kafka_logs() -> Iterator[None]:
    """kafka-python logs each refused connection at ERROR; a probe expects some."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def cluster_id() -> str:
    """A random Kafka cluster id (base64url of a UUID, as ``kafka-storage random-uuid``)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class KafkaService(Service):
    """``java -cp <jars> kafka.Kafka var/kafka/server.properties``."""

    name = "kafka"

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self.settings.stack.kafka_port

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def marker(self) -> str:
        return str(self.config_path)

    def _java(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise StackError("Java 17+ is needed for Kafka: "
                             "apt-get install -y openjdk-17-jre-headless")
        heap = self.settings.stack.kafka_heap
        return [java, f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
                "-cp", ":".join(str(jar) for jar in kafka_jars(self.settings))]

    def prepare(self, report: Reporter) -> None:
        kafka_jars(self.settings, report)  # fetch once, with progress
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(render_server_properties(self.settings, self.data_dir))
        (self.workdir / "log4j.properties").write_text(LOG4J_PROPERTIES)
        if (self.data_dir / "meta.properties").exists():
            return
        report("kafka: formatting KRaft storage ...")
        cmd = [*self._java(), "kafka.tools.StorageTool", "format", "--ignore-formatted",
               "-t", cluster_id(), "-c", str(self.config_path)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")

    def command(self) -> list[str]:
        return [*self._java(), "kafka.Kafka", str(self.config_path)]

    def probe(self, pid: int | None) -> Probe:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            with _quiet_kafka_logs():
                admin = KafkaAdminClient(bootstrap_servers=self.address,
                                         client_id="babelstream-stack",
                                         request_timeout_ms=5000, bootstrap_timeout_ms=3000)
        except (KafkaError, OSError) as exc:
            return Probe(False, detail=f"no metadata from {self.address}: {exc!r}")
        try:
            cluster = admin.describe_cluster()
            node_id = cluster["brokers"][0]["broker_id"]
            # kafka-python infers the broker's release from its ApiVersions response
            api = admin.get_broker_version_data(node_id).broker_version
        except (KafkaError, OSError, LookupError) as exc:
            return Probe(False, detail=f"metadata request failed: {exc!r}")
        finally:
            admin.close()
        match = _JAR_VERSION.search(cmdline(pid)) if pid else None
        version = match.group(1) if match else ".".join(map(str, api))
        return Probe(True, version, f"cluster {cluster.get('cluster_id')}, "
                                    f"api {'.'.join(map(str, api))}")
