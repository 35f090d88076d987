"""Operator controls on the real stack with a real worker.

Cancellation (no compute for cancelled requests, bulk jobs too), tenant
quotas (rejections with retry_after_ms), fair share (a steady tenant's P99
under a flood), reply topics (a caller reads only its own results) and
dead-letter replay (exactly the chosen letters re-published, once).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import confluent_kafka
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.bench.fairness import held_for
from pipeline.bench.workload import make_texts
from pipeline.bulk.state import JobState
from pipeline.cli.main import main
from pipeline.client import (
    ReplyBatch,
    RequestOptions,
    ResultListener,
    TranslationClient,
    build_requests,
)
from pipeline.contract.messages import DeadLetter, TranslationRequest, TranslationResult, now_ms
from pipeline.contract.pairs import (
    DLQ_TOPIC,
    REQUESTS_TOPIC,
    RESULTS_TOPIC,
    bulk_work_topic,
    work_topic,
)
from pipeline.kafka.check import admin_client
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_MODEL, DEMO_PAIR, WorkerProcess
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

# The worker (and the replaying CLI) refuse deadlines over 15 minutes.
MAX_TIMEOUT_MS = 900_000
# one tenant with a quota of 200 characters per minute
QUOTA_TENANT = f"quota-{uuid.uuid4().hex[:8]}"
ENV = {
    "BABELSTREAM_LIMITS__MAX_TIMEOUT_MS": str(MAX_TIMEOUT_MS),
    "BABELSTREAM_BULK__TIMEOUT_MS": str(MAX_TIMEOUT_MS),
    "BABELSTREAM_TENANTS__QUOTA_CHARS": json.dumps({QUOTA_TENANT: 200}),
    # bulk yields to interactive work for as long as there is any
    "BABELSTREAM_ENGINE__BULK_YIELD_MAX_S": "600",
}


@pytest.fixture(scope="module")
def settings(stack: object, monkeypatch_module: pytest.MonkeyPatch) -> Settings:
    for name, value in ENV.items():
        monkeypatch_module.setenv(name, value)
    return load_settings()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def worker(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    log_path = PROJECT_ROOT / "var" / "log" / "test-control-worker.log"
    hold = tmp_path_factory.mktemp("hold") / "engine.hold"
    with WorkerProcess(settings, log_path=log_path, hold_file=hold) as w:
        yield w


def test_a_reply_topic_carries_only_the_callers_results(
    settings: Settings, worker: WorkerProcess
) -> None:
    """Two callers at once, each on a topic of its own: neither reads a foreign result.

    The control: the shared results topic holds every caller's results, and the
    counter counts them there, so the own-topic callers' zero is not vacuous.
    """
    outcomes: dict[str, ReplyBatch] = {}
    topics_before = reply_topics(settings)
    started_ms = now_ms()

    def call(name: str, own_topic: bool) -> None:
        texts = [f"{name} sentence {i}" for i in range(40)]
        requests = build_requests(texts, DEMO_PAIR, RequestOptions(timeout_ms=120_000))
        client = TranslationClient(
            settings.kafka, settings.limits, replies=settings.replies if own_topic else None
        )
        with client:
            outcomes[name] = client.translate(requests, timeout_s=120)

    threads = [threading.Thread(target=call, args=(f"caller{i}", i < 2)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("caller0", "caller1"):
        statuses = Counter((r.status, r.error) for r in outcomes[name].results.values())
        assert not outcomes[name].missing and outcomes[name].all_ok, statuses
        assert outcomes[name].foreign == 0
    assert outcomes["caller2"].all_ok

    # Read the shared topic once everyone is answered: caller2 itself may have been
    # answered before the others' results were written, so its own count proves nothing.
    # The id that is never sent keeps the read going to the topic's end.
    own_topic_ids = [*outcomes["caller0"].request_ids, *outcomes["caller1"].request_ids]
    shared = ReplyBatch(request_ids=[*outcomes["caller2"].request_ids, f"never-{uuid.uuid4().hex}"])
    with ResultListener(settings.kafka, [RESULTS_TOPIC], since_ms=started_ms) as listener:
        listener.catch_up(shared, limit_s=60)
    assert shared.missing == shared.request_ids[-1:]
    assert shared.foreign >= len(own_topic_ids), "the shared topic holds everyone's results"

    assert reply_topics(settings) <= topics_before, "ephemeral reply topics are deleted"


def reply_topics(settings: Settings) -> set[str]:
    admin = admin_client(settings.kafka)
    try:
        return {t for t in admin.list_topics() if t.startswith(settings.replies.prefix)}
    finally:
        admin.close()


def test_a_named_reply_topic_is_kept(settings: Settings, worker: WorkerProcess) -> None:
    name = f"{settings.replies.prefix}client-{uuid.uuid4().hex[:8]}"
    with TranslationClient(
        settings.kafka, settings.limits, replies=settings.replies, reply_topic=name
    ) as client:
        replies = client.translate(build_requests(["Hello world"], DEMO_PAIR), timeout_s=60)
    assert replies.all_ok and replies.ordered[0].translation == "Ĥéļļö ŵöŕļð"  # type: ignore[union-attr]
    admin = admin_client(settings.kafka)
    try:
        assert name in admin.list_topics()
        admin.delete_topics([name])
    finally:
        admin.close()


def _request(marker: str, index: int, **changes: object) -> bytes:
    doc = {
        "request_id": f"{marker}-{index}",
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": f"Replay {index}",
        "submitted_at": now_ms(),
        **changes,
    }
    return json.dumps(doc).encode()


def test_dlq_replay_republishes_exactly_the_chosen_letters_once(
    settings: Settings, worker: WorkerProcess
) -> None:
    marker = uuid.uuid4().hex
    fixable = [_request(marker, i, timeout_ms=MAX_TIMEOUT_MS + 1000) for i in range(3)]
    unfixable = _request(marker, 3, text="é" * 9000)  # over the 16 KiB byte limit
    other = _request(marker, 4, timeout_ms=MAX_TIMEOUT_MS + 1000)  # not chosen
    broken = b"{" + marker.encode()  # not JSON, not chosen
    dlq = TopicTail(settings.kafka.bootstrap_servers, DLQ_TOPIC)
    producer = confluent_kafka.Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    for value in [*fixable, unfixable, other, broken]:
        producer.produce(REQUESTS_TOPIC, key=DEMO_PAIR.id.encode(), value=value)
    assert producer.flush(30) == 0

    def ours(records: list) -> list[DeadLetter]:
        return [DeadLetter.from_json(r.value) for r in records if marker.encode() in r.value]

    letters = ours(dlq.read_until(lambda rs: len(ours(rs)) >= 6))
    assert sorted(letter.reason for letter in letters) == ["limit_exceeded"] * 5 + ["not_json"]
    by_value = {letter.value: letter for letter in letters}
    chosen = [by_value[v.decode()] for v in [*fixable, unfixable]]
    ids = [f"{c.source_topic}:{c.partition}:{c.offset}" for c in chosen]
    args = ["dlq", "replay", "--fix-limits", "--restamp", "--json"]
    for letter_id in ids:
        args += ["--id", letter_id]

    requests = TopicTail(settings.kafka.bootstrap_servers, REQUESTS_TOPIC)
    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    dry = CliRunner().invoke(main, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["replayed"] == 3
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    assert (summary["replayed"], summary["refused"], summary["already_replayed"]) == (3, 1, 0)
    assert "limit_exceeded" in summary["refused_ids"][ids[3]]
    again = CliRunner().invoke(main, args)
    assert json.loads(again.output)["replayed"] == 0
    assert json.loads(again.output)["already_replayed"] == 3

    wanted = {f"{marker}-{i}" for i in range(3)}

    def translated(records: list[Any]) -> set[str]:
        # (the router already answered each refused request with an error result)
        parsed = [TranslationResult.from_json(r.value) for r in records]
        return {r.request_id for r in parsed if r.status == "ok"}

    assert wanted <= translated(results.read_until(lambda rs: wanted <= translated(rs), 120))
    replayed = [
        TranslationRequest.from_json(r.value)
        for r in requests.drain(quiet_s=3)
        if marker.encode() in r.value
    ]
    assert sorted(r.request_id for r in replayed) == sorted(wanted), "exactly the chosen, once"
    assert {r.timeout_ms for r in replayed} == {MAX_TIMEOUT_MS}, "--fix-limits clamped them"


def cancels_known(worker: WorkerProcess) -> float:
    url = f"http://127.0.0.1:{worker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r"^babelstream_cancels_known (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_cancelled_requests_end_cancelled_and_cost_no_compute(
    settings: Settings, worker: WorkerProcess
) -> None:
    marker = uuid.uuid4().hex[:8]
    options = RequestOptions(tenant=f"cancel-{marker}", timeout_ms=120_000)
    requests = build_requests(
        [f"Cancel test {marker} sentence {i}" for i in range(20)], DEMO_PAIR, options
    )
    doomed = {r.request_id for r in requests[::2]}
    before = cancels_known(worker)
    result = CliRunner().invoke(main, ["cancel", *sorted(doomed)])
    assert result.exit_code == 0, result.output
    deadline = time.monotonic() + 30
    while cancels_known(worker) < before + len(doomed) and time.monotonic() < deadline:
        time.sleep(0.2)  # the worker's cancel feed has them once the gauge counts them
    engine_before = worker.stats()["engine_texts"]
    with TranslationClient(settings.kafka, settings.limits, replies=settings.replies) as client:
        replies = client.translate(requests, timeout_s=120)
    assert not replies.missing
    statuses = {rid: r.status for rid, r in replies.results.items()}
    assert {statuses[rid] for rid in doomed} == {"cancelled"}
    assert {s for rid, s in statuses.items() if rid not in doomed} == {"ok"}
    assert {replies.results[rid].reason for rid in doomed} == {"cancelled"}
    # every other text is distinct and new (fresh tenant): translated once each, no more
    translated = len(requests) - len(doomed)
    stats = worker.stats_when(lambda s: s["engine_texts"] - engine_before >= translated)
    assert stats["engine_texts"] - engine_before == translated


def test_a_cancelled_bulk_job_stops_and_resumes_when_run_again(
    settings: Settings, worker: WorkerProcess, tmp_path: Path
) -> None:
    """Every segment still in the topic at the cancel ends ``cancelled``, none on the engine.

    The work is gated, so the outcome does not depend on the machine's speed:
    once 50 segments are done the worker stops (finishing the batches it had
    started), so the run's in-flight segments provably wait in the topic; the
    cancel is published while no worker runs; the restarted worker reads the
    cancel topic to its end before its first batch. Every segment the run
    published then has exactly one result: ``ok`` if it was translated before
    the stop, else ``cancelled``.
    """
    job = f"cancel-job-{uuid.uuid4().hex[:8]}"
    corpus, out = tmp_path / "corpus.parquet", tmp_path / "out.parquet"
    texts = [f"Bulk cancel {job} document {i}. It has two sentences." for i in range(600)]
    pq.write_table(pa.table({"text": texts}), corpus)
    state = JobState(settings.bulk.state_dir, job)
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "bulk",
        "run",
        str(corpus),
        "--src",
        "en",
        "--tgt",
        "en-XA",
        "-o",
        str(out),
        "--job-id",
        job,
        "--max-in-flight",
        "200",
    ]
    published = TopicTail(settings.kafka, bulk_work_topic(DEMO_MODEL))
    results = TopicTail(settings.kafka, RESULTS_TOPIC)
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and state.progress().completed < 50:
            assert run.poll() is None, run.communicate()[1][-2000:]
            time.sleep(0.2)
        worker.stop()  # drains: the batches it started end ok, nothing more is taken
        cancelled = CliRunner().invoke(main, ["bulk", "cancel", job])
        assert cancelled.exit_code == 0, cancelled.output
        _, err = run.communicate(timeout=60)
        assert run.returncode == 1 and "was cancelled" in err, err[-2000:]
    finally:
        if run.poll() is None:
            run.kill()
        restarted_at = now_ms()
        worker.start()
    status = CliRunner().invoke(main, ["bulk", "status", job, "--json"])
    assert json.loads(status.output)["state"] == "cancelled"

    def of_job(records: list[Any]) -> list[Any]:
        return [r for r in records if job.encode() in (r.value or b"")]

    sent = {TranslationRequest.from_json(r.value).request_id for r in of_job(published.drain(2))}
    assert 0 < len(sent) < len(texts), "the run stopped part-way, with segments published"

    def answered(records: list[Any]) -> set[str]:
        return {TranslationResult.from_json(r.value).request_id for r in of_job(records)}

    results.read_until(lambda records: answered(records) >= sent, timeout_s=120)
    seen = [TranslationResult.from_json(r.value) for r in of_job(results.drain(quiet_s=2))]
    assert {r.request_id for r in seen} == sent, "every published segment has a result"
    assert {r.status for r in seen} <= {"ok", "cancelled"}
    # at least once: a segment finished before the stop but not yet committed is read
    # again after the restart, and is then cancelled too (consumers keep the first result)
    translated = {r.request_id for r in seen if r.status == "ok"}
    waiting = sent - translated
    assert waiting, "segments were waiting in the topic at the cancel"
    assert all(r.status == "cancelled" for r in seen if r.request_id in waiting)
    after_restart = [r for r in seen if r.completed_at >= restarted_at]
    assert after_restart and {r.status for r in after_restart} == {"cancelled"}, (
        "after the cancel no segment reached the engine"
    )

    again = subprocess.run(command, capture_output=True, text=True, timeout=400, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    assert state.manifest()["state"] == "done"
    assert set(pq.read_table(out).column("status").to_pylist()) == {"ok"}


def test_over_quota_requests_are_rejected_with_retry_after(
    settings: Settings, worker: WorkerProcess
) -> None:
    texts = [f"Quota sentence number {i:02d} of fifty chars .........." for i in range(8)]
    assert {len(t) for t in texts} == {50}
    options = RequestOptions(tenant=QUOTA_TENANT, timeout_ms=60_000)
    requests = build_requests(texts, DEMO_PAIR, options)
    engine_before = worker.stats()["engine_texts"]
    with TranslationClient(settings.kafka, settings.limits, replies=settings.replies) as client:
        replies = client.translate(requests, timeout_s=120)
    results = [r for r in replies.ordered if r is not None]
    assert len(results) == 8
    ok = [r for r in results if r.status == "ok"]
    rejected = [r for r in results if r.status == "rejected"]
    assert len(ok) == 4 and len(rejected) == 4, "200 characters a minute: four of fifty"
    for result in rejected:
        assert result.reason == "quota_exceeded"
        assert result.retry_after_ms is not None and 0 < result.retry_after_ms <= 60_000
        assert "quota" in (result.error or "")
    stats = worker.stats_when(lambda s: s["engine_texts"] - engine_before >= len(ok))
    assert stats["engine_texts"] - engine_before == len(ok)


def answered_before_the_last(
    settings: Settings,
    worker: WorkerProcess,
    first: Sequence[TranslationRequest],
    then: Sequence[TranslationRequest],
    read_ahead: Callable[[], bool],
) -> int:
    """Submit ``first``, then ``then``, while the worker's engine is held, until
    ``read_ahead()``; release it and collect every result: how many of ``first`` were
    answered before the last of ``then``.

    Holding the engine until both are read makes the order a property of the
    scheduler, not of the machine's speed.
    """
    replies = ReplyBatch(request_ids=[r.request_id for r in (*first, *then)])
    with ResultListener(settings.kafka, [RESULTS_TOPIC]) as listener:
        with worker.engine_held():
            with TranslationClient(settings.kafka, settings.limits) as client:
                client.submit(first)
                client.submit(then)
            deadline = time.monotonic() + 120
            while not read_ahead():
                assert time.monotonic() < deadline, "the requests were not read ahead"
                time.sleep(0.2)
            listener.scan(replies)
            assert not replies.results, "answered while the engine was held"
        deadline = time.monotonic() + 300
        while replies.missing and time.monotonic() < deadline:
            listener.collect(replies, timeout_s=1.0)
    assert not replies.missing and replies.all_ok
    done_at = {rid: result.completed_at for rid, result in replies.results.items()}
    last = max(done_at[r.request_id] for r in then)
    return sum(done_at[r.request_id] < last for r in first)


FLOOD_N, STEADY_N = 1000, 20


def test_a_steady_tenant_overtakes_a_flood_read_before_it(
    settings: Settings, worker: WorkerProcess
) -> None:
    """A flood of one tenant, then a steady tenant's requests behind it, both read ahead
    while the engine is held: fair share serves the steady requests in its first rounds,
    far ahead of the flood's rest, where first come first served would answer them last.

    Holding the engine until both are read makes the order a property of the
    scheduler, not of the machine's speed. The steady tenant's P99 under a flood is a
    performance figure, measured by ``babelstream bench fairness`` (docs/guides/controls.md).
    """
    marker = uuid.uuid4().hex[:8]

    def tenant_requests(kind: str, n: int, seed: int) -> list[TranslationRequest]:
        texts = [f"{t} {marker}" for t in make_texts(n, 0.0, seed=seed)]
        options = RequestOptions(timeout_ms=300_000, tenant=f"{kind}-{marker}")
        return build_requests(texts, DEMO_PAIR, options)

    flood = tenant_requests("flood", FLOOD_N, seed=62)
    steady = tenant_requests("steady", STEADY_N, seed=63)
    flood_before = answered_before_the_last(
        settings,
        worker,
        flood,
        steady,
        lambda: held_for(worker, f"steady-{marker}") >= STEADY_N,
    )
    print(f"\nflood results before the last steady one: {flood_before}/{FLOOD_N}")
    # first come first served: all of the flood first; fair rounds alternate the two
    # tenants, after the rounds that were in flight before the steady requests were read
    assert flood_before < FLOOD_N // 2


INTERACTIVE_N, BULK_N = 300, 320


def test_interactive_work_goes_before_bulk_work_read_before_it(
    settings: Settings, worker: WorkerProcess
) -> None:
    """A bulk job's segments, then interactive requests, both read ahead while the engine
    is held: once it is released the interactive requests are answered first, while the
    bulk work waits (at most the one bulk call started in a moment without interactive
    work may finish among them).

    Holding the engine until both are read makes the order a property of the engine
    gate, not of the machine's speed; interactive P99 beside a saturating bulk job is a
    performance figure, measured by ``babelstream bench interference``.
    """
    marker = uuid.uuid4().hex[:8]
    job_id = f"job-{marker}"
    bulk = [
        request.model_copy(update={"job_id": job_id, "doc_id": "doc", "segment_index": i})
        for i, request in enumerate(
            build_requests(
                [f"{t} {marker}" for t in make_texts(BULK_N, 0.0, seed=71)],
                DEMO_PAIR,
                RequestOptions(timeout_ms=MAX_TIMEOUT_MS, tenant=f"bulk-{marker}"),
            )
        )
    ]
    interactive = build_requests(
        [f"{t} {marker}" for t in make_texts(INTERACTIVE_N, 0.0, seed=72)],
        DEMO_PAIR,
        RequestOptions(timeout_ms=MAX_TIMEOUT_MS, tenant=f"interactive-{marker}"),
    )
    topics = {work_topic(DEMO_MODEL): INTERACTIVE_N, bulk_work_topic(DEMO_MODEL): BULK_N}
    before = worker.stats()["admitted"]

    def all_taken_in() -> bool:
        # every request of both taken in by its agent (held for a round, or in a batch
        # waiting for the engine), so none arrives once the engine is released
        admitted = worker.stats()["admitted"]
        return all(admitted.get(t, 0) - before.get(t, 0) >= n for t, n in topics.items())

    bulk_before = answered_before_the_last(settings, worker, bulk, interactive, all_taken_in)
    print(f"\nbulk results before the last interactive one: {bulk_before}/{BULK_N}")
    # first come first served would answer the bulk segments, read first, first
    assert bulk_before <= settings.worker.bulk_max_messages
