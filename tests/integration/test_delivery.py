"""At-least-once across a worker restart under traffic, proven by reconciliation.

Paced traffic runs before, during and after the worker is stopped (SIGKILL:
a crash; SIGTERM: a graceful stop) and a replacement is started, including
the window in which the replacement joins the group. Then every acknowledged
request id must have a result within a bound, the group's committed offsets
must reach the log end on every input topic once traffic stops, and
duplicates must stay within what was consumed but not yet committed.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from pipeline.contract.messages import now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, work_topic
from pipeline.drill.reconcile import ResultTally, committed_lag, reconcile, wait_committed
from pipeline.drill.traffic import PacedTraffic
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_MODEL, WorkerProcess

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")
GROUP = "babelstream"
COUNT, RATE, FAULT_AT = 1500, 100.0, 500
RESULT_BOUND_S = 120.0
COMMIT_BOUND_S = 60.0


@pytest.fixture
def settings(stack: object) -> Settings:
    return load_settings()


# How the worker takes and cuts its batches. An adaptive controller with a tight
# objective asks for batches smaller than a take, so each take or fair-share round is
# cut into micro-batches in flight at once, committed out of order.
ADAPTIVE = {
    "BABELSTREAM_BATCHING__ADAPTIVE": "true",
    "BABELSTREAM_BATCHING__P95_MS": json.dumps({EN_XA.id: 20.0}),
}
SHAPES = {
    "fair-static": {},
    "fair-adaptive": ADAPTIVE,
    "plain-adaptive": {**ADAPTIVE, "BABELSTREAM_TENANTS__FAIR_SHARE": "false"},
}


@pytest.fixture
def worker(settings: Settings, request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    log = PROJECT_ROOT / "var" / "log" / "test-delivery-worker.log"
    w = WorkerProcess(settings, log_path=log, env=SHAPES[request.param]).start()
    yield w
    w.stop()


@pytest.mark.parametrize(
    ("sig", "worker"),
    [
        (signal.SIGKILL, "fair-static"),
        (signal.SIGTERM, "fair-static"),
        (signal.SIGKILL, "fair-adaptive"),
        (signal.SIGKILL, "plain-adaptive"),
    ],
    ids=["kill", "term", "kill-fair-adaptive", "kill-plain-adaptive"],
    indirect=["worker"],
)
def test_restart_under_traffic_loses_nothing(
    settings: Settings, worker: WorkerProcess, sig: signal.Signals
) -> None:
    input_topics = [REQUESTS_TOPIC, work_topic(DEMO_MODEL)]
    traffic = PacedTraffic(settings.kafka, EN_XA, count=COUNT, rate=RATE, timeout_ms=600_000)
    with ResultTally(settings.kafka, traffic.marker) as tally:
        traffic.start()
        assert traffic.when_acked(FAULT_AT).wait(120), "traffic did not start"
        fault_start = now_ms()
        # What the killed worker consumed but had not committed bounds the duplicates.
        lag_at_fault = committed_lag(settings.kafka, GROUP, input_topics)
        worker.signal(sig)
        lag_after_stop = committed_lag(settings.kafka, GROUP, input_topics)
        time.sleep(5)
        restarted_ms = now_ms()
        starter = threading.Thread(target=worker.start, daemon=True)
        starter.start()
        traffic.join(COUNT / RATE + 120)
        starter.join(240)
        fault_end = now_ms()
        acked = dict(traffic.acked)
        tally.wait_for(acked, RESULT_BOUND_S)
        lag = wait_committed(settings.kafka, GROUP, input_topics, COMMIT_BOUND_S)
        results = tally.snapshot()
    report = reconcile(acked, results, (fault_start, fault_end))
    # the replacement is back in service: its first result of any request
    after_restart = [t for t in tally.first_seen_ms.values() if t >= restarted_ms]
    summary = {
        **report.to_dict(),
        "signal": sig.name,
        "failed_sends": len(traffic.failed),
        "uncommitted_at_stop": sum(lag_after_stop.values()),
        "lag_at_fault": lag_at_fault,
        "final_lag": lag,
        "restart_to_first_result_ms": min(after_restart) - restarted_ms if after_restart else None,
    }
    print(json.dumps(summary))
    assert not traffic.failed and report.acked == COUNT
    assert report.missing == [], f"{len(report.missing)} acknowledged requests got no result"
    assert report.statuses == {"ok": COUNT} and report.error_results == 0
    assert not any(lag.values()), f"commits did not reach the log end: {lag}"
    if sig is signal.SIGTERM:
        assert report.duplicates == 0
    else:
        assert report.duplicates <= sum(lag_after_stop.values())
