"""One request cannot stop a pair: a real worker sets apart the request a step fails on.

The faults are injected into a real worker process the way a bug would hit
it: a ``sitecustomize`` module on the worker's ``PYTHONPATH`` wraps one step
so that it raises for requests carrying a marker text (an exception no step
classifies), or raises a transient fault while a flag file exists. The worker,
its steps and the stack are otherwise the real ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.client import RequestOptions, TranslationClient, build_requests
from pipeline.contract.messages import DeadLetter, TranslationResult
from pipeline.contract.pairs import DLQ_TOPIC, RESULTS_TOPIC
from pipeline.kafka.check import admin_client
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

POISON = "INJECTED-FAULT"
STALL = "INJECTED-STALL"
GROUP = "babelstream"

# Wraps the in-batch dedup step: an unclassified exception for a batch holding the
# poison marker; a transient fault for one holding the stall marker while the flag exists.
SITECUSTOMIZE = """
import os
import pipeline.steps.dedup as dedup
from pipeline.steps.base import TransientError

_step = dedup.InBatchDedup.__call__

async def _faulty(self, batch):
    texts = [i.request.text for i in batch.pending() if i.request is not None]
    if any({poison!r} in t for t in texts):
        raise LookupError("a fault no step classifies")
    if any({stall!r} in t for t in texts) and os.path.exists({flag!r}):
        raise TransientError("an injected infrastructure fault")
    return await _step(self, batch)

dedup.InBatchDedup.__call__ = _faulty
"""


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def flag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flag") / "stall"


@pytest.fixture(scope="module")
def worker(
    settings: Settings, flag: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    hooks = tmp_path_factory.mktemp("hooks")
    (hooks / "sitecustomize.py").write_text(
        textwrap.dedent(SITECUSTOMIZE.format(poison=POISON, stall=STALL, flag=str(flag)))
    )
    env = {
        "PYTHONPATH": f"{hooks}:{PROJECT_ROOT}",
        "BABELSTREAM_WORKER__STALL_REPORT_S": "2",
        "BABELSTREAM_TENANTS__FAIR_SHARE": "false",
    }
    log_path = PROJECT_ROOT / "var" / "log" / "test-isolation-worker.log"
    with WorkerProcess(settings, log_path=log_path, env=env) as w:
        yield w


def committed(settings: Settings, topic: str, partition: int) -> int:
    """The worker group's committed offset of one partition (-1: none)."""
    admin = admin_client(settings.kafka, "tests-committed")
    try:
        offsets = admin.list_group_offsets({GROUP: None})[GROUP]
    finally:
        admin.close()
    return next(
        (m.offset for tp, m in offsets.items() if (tp.topic, tp.partition) == (topic, partition)),
        -1,
    )


def test_a_request_a_step_fails_on_ends_alone_and_its_offset_is_committed(
    settings: Settings, worker: WorkerProcess
) -> None:
    marker = uuid.uuid4().hex[:8]
    texts = [f"Isolation {marker} sentence {i}." for i in range(20)]
    texts[7] = f"Isolation {marker} {POISON} sentence."
    letters = TopicTail(settings.kafka, DLQ_TOPIC)
    retried_before = worker.stats()["retried_attempts"]
    requests = build_requests(texts, DEMO_PAIR, RequestOptions(timeout_ms=120_000))
    with TranslationClient(settings.kafka, settings.limits, replies=settings.replies) as client:
        replies = client.translate(requests, timeout_s=60)
    results = replies.ordered
    assert all(r is not None for r in results)
    poisoned = results[7]
    assert poisoned is not None
    assert (poisoned.status, poisoned.reason) == ("error", "internal_error")
    assert "LookupError" in (poisoned.error or "") and "Traceback" not in (poisoned.error or "")
    assert [r.status for i, r in enumerate(results) if i != 7 and r] == ["ok"] * 19
    # set apart by bisection within the attempt: the batch was not retried (held back)
    assert worker.stats()["retried_attempts"] == retried_before

    def ours(records: list[object]) -> list[DeadLetter]:
        found = [DeadLetter.from_json(r.value) for r in records]  # type: ignore[attr-defined]
        return [d for d in found if d.reason == "internal_error" and POISON in (d.value or "")]

    (letter,) = ours(letters.read_until(lambda rs: bool(ours(rs)), timeout_s=30))
    assert "Traceback" in letter.error and "LookupError" in letter.error
    assert json.loads(letter.value or "{}")["request_id"] == requests[7].request_id
    # the partition's committed offset passes the poisoned record soon after (a bound, not a figure)
    deadline = time.monotonic() + 60
    while committed(settings, letter.source_topic, letter.partition) <= letter.offset:
        assert time.monotonic() < deadline, "the poisoned record's offset was not committed"
        time.sleep(0.25)
    assert worker.returncode is None
    assert (worker.readiness() or {}).get("isolated"), worker.readiness()


def test_a_failing_batch_shows_on_readiness_and_status_until_it_goes_through(
    settings: Settings, worker: WorkerProcess, flag: Path
) -> None:
    flag.touch()
    results = TopicTail(settings.kafka, RESULTS_TOPIC)
    requests = build_requests(
        [f"Stalled {uuid.uuid4().hex[:8]} {STALL}."], DEMO_PAIR, RequestOptions(timeout_ms=300_000)
    )
    with TranslationClient(settings.kafka, settings.limits) as client:
        client.submit(requests)
    deadline = time.monotonic() + 60
    while "stalled" not in (readiness := worker.readiness() or {}):
        assert time.monotonic() < deadline, readiness
        time.sleep(0.5)
    assert readiness["ready"] is False and "batches failing" in readiness["reason"]
    (health,) = readiness["stalled"].values()
    assert health["error"] == "TransientError" and health["attempts"] >= 1
    status = subprocess.run(
        [sys.executable, "-m", "pipeline", "status"], capture_output=True, text=True, timeout=60
    )
    assert "batches failing" in status.stdout + status.stderr, status.stdout
    flag.unlink()
    wanted = requests[0].request_id

    def answered(records: list[object]) -> bool:
        return any(
            TranslationResult.from_json(r.value).request_id == wanted  # type: ignore[attr-defined]
            for r in records
        )

    assert answered(results.read_until(answered, timeout_s=60)), "it went through"
    deadline = time.monotonic() + 30
    while not (worker.readiness() or {}).get("ready"):
        assert time.monotonic() < deadline, worker.readiness()
        time.sleep(0.5)
