"""Transient faults are retried, never turned into results.

Paced traffic through a running worker while Redis goes away and, a little
later, the broker itself restarts. Every acknowledged request must end
``ok`` (duplicates counted, at-least-once), and not one ``error`` result may
appear: the faults belonged to the infrastructure, not to any request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from pipeline.contract.messages import now_ms
from pipeline.contract.pairs import Pair
from pipeline.drill.reconcile import ResultTally, reconcile
from pipeline.drill.traffic import PacedTraffic
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack import manager
from pipeline.stack.local_worker import WorkerProcess

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")
COUNT, RATE = 900, 30.0


@pytest.fixture
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log = PROJECT_ROOT / "var" / "log" / "test-faults-worker.log"
    with WorkerProcess(settings, log_path=log) as w:
        yield w


def test_redis_outage_and_broker_restart_give_no_error_results(
    settings: Settings, worker: WorkerProcess
) -> None:
    traffic = PacedTraffic(settings.kafka, EN_XA, count=COUNT, rate=RATE, timeout_ms=600_000)
    with ResultTally(settings.kafka, traffic.marker) as tally:
        traffic.start()
        assert traffic.when_acked(COUNT // 3).wait(120), "traffic did not start"
        fault_start = now_ms()
        manager.down(settings, names=["redis"])
        time.sleep(3)
        manager.down(settings, names=["kafka"])  # a broker restart, with Redis still down
        time.sleep(5)
        manager.up(settings)
        fault_end = now_ms()
        traffic.join(COUNT / RATE + 180)
        acked = dict(traffic.acked)
        tally.wait_for(acked, 240)
        results = tally.snapshot()
    report = reconcile(acked, results, (fault_start, fault_end))
    print(
        json.dumps(
            {
                **report.to_dict(),
                "failed_sends": len(traffic.failed),
                "worker_exit": worker.returncode,
            }
        )
    )
    assert worker.returncode is None, "the worker must ride out the faults"
    assert report.acked > COUNT // 2, "most requests must be acknowledged"
    assert report.missing == [], f"{len(report.missing)} acknowledged requests got no result"
    assert report.error_results == 0, "transient faults must never become error results"
    assert set(report.statuses) == {"ok"}
