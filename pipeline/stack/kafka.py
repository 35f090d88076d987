"""Apache Kafka in KRaft mode: one node, or a cluster of combined broker + controller nodes."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import uuid
from pathlib import Path

from pipeline.errors import StackError
from pipeline.kafka.clients import kafka_logs_silenced, kafka_python_options
from pipeline.observability.progress import Reporter
from pipeline.settings import KafkaSettings, Settings
from pipeline.stack.jars import kafka_jars
from pipeline.stack.layout import HOST, NodePorts, node_name, node_ports
from pipeline.stack.procs import cmdline
from pipeline.stack.secure import ServiceSecrets, service_secrets
from pipeline.stack.service import Probe, Service
from pipeline.stack.tls import CLIENT_NAME, SERVER_NAMES

SCRAM_MECHANISM = "SCRAM-SHA-512"
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


def render_server_properties(
    settings: Settings, node: NodePorts, log_dir: Path, secure: ServiceSecrets | None = None
) -> str:
    """``server.properties`` for one combined broker+controller node, tuned for tests.

    Replication of the internal topics (consumer offsets, transaction state)
    and the topic defaults follow ``settings.kafka``; secure nodes serve
    SASL_SSL (SCRAM-SHA-512) to clients and talk mutual TLS among themselves,
    with no PLAINTEXT listener at all.
    """
    kafka, stack = settings.kafka, settings.stack
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller}" for n in node_ports(stack))
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://{HOST}:{node.client},CONTROLLER://{HOST}:{node.controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{node.client}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "4",
        # As in production (deploy/k8s): every topic is created with its configs
        # (pipeline/kafka/topics.py). aiokafka's metadata requests always ask for
        # auto-creation, so with it on a worker's producer re-creates a reply topic
        # its caller has just deleted.
        "auto.create.topics.enable": "false",
        "default.replication.factor": str(kafka.replication_factor),
        "min.insync.replicas": str(kafka.min_insync_replicas),
        "offsets.topic.replication.factor": str(kafka.replication_factor),
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": str(kafka.replication_factor),
        "transaction.state.log.min.isr": str(kafka.min_insync_replicas),
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "log.retention.hours": "24",
    }
    if secure is not None:
        props.update(
            {
                "listeners": f"SASL_SSL://{HOST}:{node.client},SSL://{HOST}:{node.ssl},"
                f"CONTROLLER://{HOST}:{node.controller}",
                "advertised.listeners": f"SASL_SSL://{HOST}:{node.client},SSL://{HOST}:{node.ssl}",
                "inter.broker.listener.name": "SSL",
                "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL,SSL:SSL",
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(secure.tls.server_keystore),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(secure.tls.ca),
                # nodes and mutual-TLS clients must show a certificate of our CA
                "listener.name.ssl.ssl.client.auth": "required",
                "listener.name.controller.ssl.client.auth": "required",
                # Requests are authorized: what no ACL allows is refused. The nodes (their
                # certificates), mutual-TLS clients and the services' SCRAM user may do
                # anything; tenants get ACLs for their own topics (`babelstream tenants add`).
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
                "super.users": ";".join(
                    f"User:{name}" for name in (secure.username, *SERVER_NAMES, CLIENT_NAME)
                ),
            }
        )
    return "".join(f"{key}={value}\n" for key, value in props.items())


def cluster_id(seed: str) -> str:
    """A Kafka cluster id (base64url of a UUID, as ``kafka-storage random-uuid`` prints).

    Derived from ``seed`` (the stack home and layout), so every node of one
    cluster, and a node whose data was wiped, is formatted with the same id.
    """
    # Kafka's own Uuid.randomUuid() redraws an id that starts with '-', which
    # kafka-storage's argument parser reads as an option; redraw the same way,
    # deterministically, by salting the seed.
    salt = 0
    while True:
        name = f"babelstream:{seed}" + (f"#{salt}" if salt else "")
        digest = uuid.uuid5(uuid.NAMESPACE_URL, name)
        encoded = base64.urlsafe_b64encode(digest.bytes).rstrip(b"=").decode()
        if not encoded.startswith("-"):
            return encoded
        salt += 1


class KafkaService(Service):
    """One node: ``java -cp <jars> kafka.Kafka var/<name>/server.properties``.

    A single-node stack has one node named ``kafka`` (``var/kafka/``); a
    cluster has ``kafka-1`` ... ``kafka-N``. A secure stack keeps its data in
    ``data-secure/``, apart from the plaintext stack's, because its SCRAM
    users are written when the storage is formatted.
    """

    def __init__(self, settings: Settings, node: NodePorts, clients: KafkaSettings) -> None:
        super().__init__(settings)
        self.node = node
        self.name = node_name(settings.stack, node)
        # how a client reaches this node (probe): the stack's client settings, this node only
        self._clients = clients.model_copy(update={"bootstrap_servers": self.address})

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self.node.client

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.workdir / ("data-secure" if self.settings.stack.secure else "data")

    @property
    def marker(self) -> str:
        return str(self.config_path)

    def _java(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise StackError(
                "Java 17+ is needed for Kafka: apt-get install -y openjdk-17-jre-headless"
            )
        heap = self.settings.stack.kafka_heap
        return [
            java,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            "-cp",
            ":".join(str(jar) for jar in kafka_jars(self.settings)),
        ]

    def _secure(self) -> ServiceSecrets | None:
        return service_secrets(self.home, "kafka") if self.settings.stack.secure else None

    def prepare(self, report: Reporter) -> None:
        kafka_jars(self.settings, report)  # fetch once, with progress
        self.workdir.mkdir(parents=True, exist_ok=True)
        secure = self._secure()
        self.config_path.write_text(
            render_server_properties(self.settings, self.node, self.data_dir, secure)
        )
        (self.workdir / "log4j.properties").write_text(LOG4J_PROPERTIES)
        if (self.data_dir / "meta.properties").exists():
            return
        report(f"{self.name}: formatting KRaft storage ...")
        stack = self.settings.stack
        seed = f"{stack.home}:{stack.brokers}:{'secure' if secure else 'plaintext'}"
        cmd = [
            *self._java(),
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            "-t",
            cluster_id(seed),
            "-c",
            str(self.config_path),
        ]
        if secure is not None:
            # SCRAM users are bootstrapped into the metadata log (KIP-900)
            cmd += [
                "--add-scram",
                f"{SCRAM_MECHANISM}=[name={secure.username},"
                f"password={secure.password.get_secret_value()}]",
            ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")

    def command(self) -> list[str]:
        return [*self._java(), "kafka.Kafka", str(self.config_path)]

    def probe(self, pid: int | None) -> Probe:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        try:
            with kafka_logs_silenced():
                admin = KafkaAdminClient(
                    **{
                        **kafka_python_options(self._clients, "stack"),
                        "request_timeout_ms": 5000,
                        "bootstrap_timeout_ms": 3000,
                    }
                )
        except (KafkaError, OSError) as exc:
            return Probe(False, detail=f"no metadata from {self.address}: {exc!r}")
        try:
            cluster = admin.describe_cluster()
            brokers = len(cluster["brokers"])
            # kafka-python infers the broker's release from its ApiVersions response
            api = admin.get_broker_version_data(self.node.node_id).broker_version
        except (KafkaError, OSError, LookupError) as exc:
            return Probe(False, detail=f"metadata request failed: {exc!r}")
        finally:
            admin.close()
        match = _JAR_VERSION.search(cmdline(pid)) if pid else None
        version = match.group(1) if match else ".".join(map(str, api))
        return Probe(
            True,
            version,
            f"cluster {cluster.get('cluster_id')}, node "
            f"{self.node.node_id}, {brokers} broker(s), "
            f"{self._clients.security_protocol}, "
            f"api {'.'.join(map(str, api))}",
        )
