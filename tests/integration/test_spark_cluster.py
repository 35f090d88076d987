"""The SLA job on a local Spark standalone cluster gives what it gives in local mode.

``spark_services`` (what ``babelstream spark up`` starts: a master and two
workers from pyspark's own ``spark-class``) run on free loopback ports with
their PID files and logs under a temporary stack home; the same pre-loaded
input (repeats, bulk, unsupported pairs, a closing tick) goes through
``babelstream sla --until-idle`` in ``local[2]`` and with ``--master
spark://...``, and the two runs' windows must be identical.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from random import Random

import pytest
from kafka import KafkaProducer

from pipeline.contract.messages import UNSUPPORTED_PAIR_REASON, SlaWindow, TranslationResult
from pipeline.kafka.check import admin_client
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import Settings, SparkClusterSettings, StackSettings
from pipeline.sla.history import read_history
from pipeline.sla.ticks import TickSource
from pipeline.stack import manager
from pipeline.stack.manager import Endpoints
from pipeline.stack.spark import spark_services
from tests.integration.helpers import TopicTail

# Three daemons and two job runs: a few minutes on an idle 2-core machine, far more when shared.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

BASE = 1_700_000_000_000


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError("no run of free ports")


def results(rng: Random) -> list[tuple[bytes, bytes]]:
    records = []
    for second in range(30):
        for pair, job_id, reason in (
            ("en_de", None, None),
            ("de_en", None, None),
            ("en_de", "job-1", None),
            ("en_xx", None, UNSUPPORTED_PAIR_REASON),
        ):
            for i in range(3):
                request_id = f"{pair}-{job_id}-{second}-{i}"
                latency = int(rng.uniform(10, 3000))
                completed = BASE + second * 1000 + int(rng.uniform(0, 999))
                value = TranslationResult(
                    request_id=request_id,
                    source_lang=pair[:2],
                    target_lang=pair[3:],
                    pair=pair,
                    status=rng.choice(["ok", "ok", "timeout", "error"]),
                    job_id=job_id,
                    reason=reason,
                    submitted_at=completed - latency,
                    completed_at=completed,
                    latency_ms=latency,
                ).to_json()
                records.append((request_id.encode(), value))
                if rng.random() < 0.2:
                    records.append((request_id.encode(), value))
    return records


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Settings]:
    first = free_port_run(6)
    settings = Settings(
        stack=StackSettings(home=tmp_path / "var"),
        spark=SparkClusterSettings(
            master_port=first,
            master_webui_port=first + 1,
            worker_port=first + 2,
            worker_webui_port=first + 4,
        ),
    )
    try:
        manager.start(settings, spark_services(settings))
        yield settings
    finally:
        manager.down(settings, names={s.name for s in spark_services(settings)})


def run_job(
    bootstrap: str, topics: dict[str, str], sink: str, work: Path, master: str | None
) -> list[SlaWindow]:
    tail = TopicTail(bootstrap, sink)
    args = [
        "--source-topic",
        topics["results"],
        "--sink-topic",
        sink,
        "--checkpoint",
        str(work / "ck"),
        "--history",
        str(work / "history"),
        "--window",
        "2s",
        "--watermark",
        "3s",
        "--trigger",
        "500ms",
        "--sinks",
        "kafka,parquet",
        "--until-idle",
        "8s",
    ]
    if master:
        args += ["--master", master]
    env = {
        **os.environ,
        "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
        "BABELSTREAM_SLA__TICKS_TOPIC": topics["ticks"],
        "BABELSTREAM_SLA__LATE_TOPIC": topics["late"],
        "BABELSTREAM_SLA__LATE_HISTORY_DIR": str(work / "late"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "sla", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        return [SlaWindow.from_json(r.value) for r in tail.drain(quiet_s=2.0)]
    finally:
        tail.close()


def test_the_cluster_computes_what_local_mode_computes(
    stack: Endpoints, cluster: Settings, tmp_path: Path
) -> None:
    bootstrap = stack.bootstrap_servers
    run = uuid.uuid4().hex[:8]
    topics = {
        role: f"test.spark.{run}.{role}"
        for role in ("results", "ticks", "late", "local", "cluster")
    }
    ensure_topics(
        stack.settings.kafka,
        {name: TopicSpec(3 if role == "results" else 1) for role, name in topics.items()},
    )
    admin = admin_client(stack.settings.kafka, "tests")
    try:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for key, value in results(Random(11)):
            producer.send(topics["results"], key=key, value=value)
        topic, key, value = TickSource(
            "en_de", "test", lambda: BASE + 60_000, topics["ticks"]
        ).record()
        producer.send(topic, key=key, value=value)
        producer.flush()
        producer.close()
        statuses = {s.name: s for s in manager.status(cluster)}
        assert all(
            statuses[s.name].healthy and statuses[s.name].pid for s in spark_services(cluster)
        ), statuses
        local = run_job(bootstrap, topics, topics["local"], tmp_path / "local", None)
        on_cluster = run_job(
            bootstrap, topics, topics["cluster"], tmp_path / "cluster", cluster.spark.master_url
        )
    finally:
        admin.delete_topics(list(topics.values()))
        admin.close()

    def key(w: SlaWindow) -> tuple[str, str, int]:
        return w.pair, w.priority, w.window_start

    assert len(local) == 4 * 15, "four series, fifteen 2 s windows each"
    assert sorted(on_cluster, key=key) == sorted(local, key=key)
    assert sum(w.duplicates for w in local) > 0
    local_sketches = {key(w): s for w, s in read_history(tmp_path / "local" / "history")}
    cluster_sketches = {key(w): s for w, s in read_history(tmp_path / "cluster" / "history")}
    assert local_sketches.keys() == cluster_sketches.keys()
    assert all(cluster_sketches[k] for k in local_sketches)
