"""A local Spark standalone cluster: one master and N workers, from pyspark's own launcher.

No download: pyspark's wheel ships Spark's jars and ``bin/spark-class``, which
starts ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker`` as
foreground JVMs. Everything binds to ``spark.host`` (loopback by default) on the
ports in :class:`~pipeline.settings.SparkClusterSettings`; work dirs and logs
live under ``var/spark/``. ``babelstream spark up`` starts it,
``babelstream sla --master spark://HOST:PORT`` runs the SLA job on it, and
``babelstream down`` (or ``spark down``) stops it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pipeline.errors import StackError
from pipeline.observability.progress import Reporter
from pipeline.settings import Settings, SparkClusterSettings
from pipeline.stack.service import Probe, Service

_HTTP_TIMEOUT_S = 2.0


def spark_home() -> Path:
    """The pyspark installation (it has ``bin/spark-class`` and ``jars/``)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists():
        raise StackError(f"pyspark at {home} has no bin/spark-class")
    return home


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def master_state(cluster: SparkClusterSettings) -> dict[str, Any] | None:
    """The master's ``/json`` status (None when it does not answer)."""
    url = f"http://{cluster.host}:{cluster.master_webui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S) as response:
            state: dict[str, Any] = json.load(response)
            return state
    except (OSError, urllib.error.URLError, ValueError):
        return None


class _SparkDaemon(Service):
    """A Spark deploy daemon run in the foreground by ``spark-class``."""

    main_class: str

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.cluster = settings.spark

    @property
    def host(self) -> str:
        return self.cluster.host

    @property
    def workdir(self) -> Path:
        return self.home / "spark" / self.name

    @property
    def marker(self) -> str:
        # the JVM's command line carries it (SPARK_DAEMON_JAVA_OPTS)
        return f"-Dbabelstream.service={self.workdir}"

    def prepare(self, report: Reporter) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)

    def _args(self) -> list[str]:
        raise NotImplementedError

    def command(self) -> list[str]:
        home = spark_home()
        env = {
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": self.cluster.host,
            "SPARK_DAEMON_MEMORY": self.cluster.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": self.marker,
            "SPARK_LOG_DIR": str(self.workdir),
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_NO_DAEMONIZE": "1",
        }
        # `env` execs spark-class, which execs the JVM: the recorded pid is the daemon's
        return [
            "env",
            *(f"{key}={value}" for key, value in env.items()),
            str(home / "bin" / "spark-class"),
            self.main_class,
            *self._args(),
        ]


class SparkMasterService(_SparkDaemon):
    """The standalone master on ``spark.host:master_port`` (web UI on ``master_webui_port``)."""

    name = "spark-master"
    main_class = "org.apache.spark.deploy.master.Master"

    @property
    def port(self) -> int:
        return self.cluster.master_port

    def _args(self) -> list[str]:
        return [
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.cluster.master_webui_port),
        ]

    def probe(self, pid: int | None) -> Probe:
        state = master_state(self.cluster)
        if state is None or state.get("status") != "ALIVE":
            return Probe(
                False,
                detail=f"master web UI on port {self.cluster.master_webui_port} "
                "does not answer ALIVE",
            )
        alive = sum(w.get("state") == "ALIVE" for w in state.get("workers", []))
        return Probe(True, spark_version(), f"{state.get('url')}, {alive} workers alive")


class SparkWorkerService(_SparkDaemon):
    """Worker ``index`` (0-based) on ``worker_port + index``, registered with the master."""

    main_class = "org.apache.spark.deploy.worker.Worker"

    def __init__(self, settings: Settings, index: int) -> None:
        super().__init__(settings)
        self.index = index
        self.name = f"spark-worker-{index}"

    @property
    def port(self) -> int:
        return self.cluster.worker_port + self.index

    def _args(self) -> list[str]:
        return [
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.cluster.worker_webui_port + self.index),
            "--cores",
            str(self.cluster.worker_cores),
            "--memory",
            self.cluster.worker_memory,
            "--work-dir",
            str(self.workdir / "work"),
            self.cluster.master_url,
        ]

    def probe(self, pid: int | None) -> Probe:
        state = master_state(self.cluster) or {}
        for worker in state.get("workers", []):
            if (
                worker.get("host") == self.host
                and worker.get("port") == self.port
                and worker.get("state") == "ALIVE"
            ):
                return Probe(
                    True,
                    spark_version(),
                    f"registered with {self.cluster.master_url}, "
                    f"{worker.get('cores')} cores, {worker.get('memory')} MB",
                )
        return Probe(False, detail=f"not registered with {self.cluster.master_url}")


def spark_services(settings: Settings) -> list[Service]:
    """The cluster's daemons, in start order (master first)."""
    return [
        SparkMasterService(settings),
        *(SparkWorkerService(settings, i) for i in range(settings.spark.workers)),
    ]
