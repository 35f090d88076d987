"""First run: a broker that has never seen the project, a worker, the very first request.

A stack of its own (temporary home, data dirs and ports; no topics at all),
as on a brand-new machine. The first request must come back ``ok`` (not an
``error`` from a changelog topic that did not exist yet), the worker's first
offset commit must complete, and SIGTERM must stop it within the bound.
Runs first in ``make test`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.sla import KafkaSink
from pipeline.client import TranslationClient, build_requests
from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, work_topic
from pipeline.drill.reconcile import wait_committed
from pipeline.kafka.check import admin_client
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack import manager
from pipeline.stack.local_worker import DEMO_MODEL, WorkerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.first_run]

EN_XA = Pair("en", "en-XA")
STOP_BOUND_S = 10.0


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, dict[str, str]]]:
    """A new, empty stack on free ports; the jars Maven already fetched are reused."""
    home = tmp_path_factory.mktemp("fresh-stack")
    shared = load_settings().stack.home / "jars"
    (home / "jars").symlink_to(shared if shared.exists() else PROJECT_ROOT / "var" / "jars")
    kafka_port, redis_port = free_port(), free_port()
    env = {
        "BABELSTREAM_STACK__HOME": str(home),
        "BABELSTREAM_STACK__KAFKA_PORT": str(kafka_port),
        "BABELSTREAM_STACK__KAFKA_CONTROLLER_PORT": str(free_port()),
        "BABELSTREAM_STACK__REDIS_PORT": str(redis_port),
        "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka_port}",
        "BABELSTREAM_REDIS__URL": f"redis://127.0.0.1:{redis_port}/0",
        "BABELSTREAM_WORKER__DATA_DIR": str(home / "faust"),
        "BABELSTREAM_WORKER__STOP_TIMEOUT_S": str(STOP_BOUND_S),
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        settings = load_settings()
        manager.start_services(settings)  # an empty broker: no topics, no groups
        try:
            yield settings, env
        finally:
            manager.down(settings)


def test_the_sla_sink_reads_its_mark_on_a_new_broker(
    fresh: tuple[Settings, dict[str, str]],
) -> None:
    # First in this file: no consumer group has asked for a coordinator yet, so
    # the broker creates __consumer_offsets on this lookup and answers
    # CoordinatorNotAvailable until it is loaded. The SLA job's first batch asks
    # exactly this (has this batch been written?); that must wait, not fail the job.
    settings, _ = fresh
    sink = KafkaSink(settings)
    try:
        assert not sink.written(settings.sla.sink_topic, 0)
    finally:
        sink.close()


def test_first_request_on_a_new_broker_is_ok(fresh: tuple[Settings, dict[str, str]]) -> None:
    settings, env = fresh
    admin = admin_client(settings.kafka)
    try:
        assert not [t for t in admin.list_topics() if t.startswith(("translate.", "babelstream"))]
    finally:
        admin.close()
    log_path = Path(env["BABELSTREAM_STACK__HOME"]) / "log" / "first-run-worker.log"
    worker = WorkerProcess(settings, log_path=log_path, env=env)
    # start() only returns once the readiness page says ready and a probe came back ok
    worker.start(ready_timeout_s=240)
    try:
        with TranslationClient(settings.kafka) as client:
            (result,) = client.translate(build_requests(["Hello world"], EN_XA), 60).ordered
        assert result is not None and result.status == "ok", result
        assert result.translation == "Ĥéļļö ŵöŕļð"
        # the first commits complete: nothing left uncommitted on the topics it read
        topics = [REQUESTS_TOPIC, work_topic(DEMO_MODEL)]
        lag = wait_committed(settings.kafka, "babelstream", topics, timeout_s=30)
        assert not any(lag.values()), f"commits stalled: {lag}"
    finally:
        took = worker.signal(signal.SIGTERM, timeout_s=60)
    assert took is not None and took <= STOP_BOUND_S + 2, f"SIGTERM took {took:.1f}s"
    assert worker.returncode == 0
