"""The command line against the real stack and a real worker, as an operator meets it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from pipeline.cli.commands.client import no_result_hint
from pipeline.client import ReplyBatch, ResultListener, TranslationClient, build_requests
from pipeline.contract.messages import now_ms
from pipeline.contract.pairs import REQUESTS_TOPIC, RESULTS_TOPIC, Pair, work_topic
from pipeline.kafka.clients import kafka_python_options
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_MODEL, WorkerProcess

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")
PROGRAM = str(Path(sys.executable).with_name("babelstream"))


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    with WorkerProcess(
        settings, log_path=PROJECT_ROOT / "var" / "log" / "test-cli-worker.log"
    ) as w:
        yield w


def babelstream(
    *args: str, stdin: str | None = None, timeout_s: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed console script, stdout and stderr piped (not a terminal)."""
    return subprocess.run(
        [PROGRAM, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
    )


def test_successful_translations_log_no_error(
    settings: Settings, worker: WorkerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Normal operation logs no ERROR: many client lifetimes in-process (closing a client
    used to log ``ERROR kafka.cluster: Metadata refresh: failed Cancelled`` about one time in
    three here), then the CLI as users run it."""
    caplog.set_level(logging.WARNING)
    for i in range(20):
        with TranslationClient(settings.kafka) as client:
            replies = client.translate(build_requests([f"Quiet {i}"], EN_XA), timeout_s=60)
        assert replies.all_ok
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [f"{r.name}: {r.getMessage()}" for r in errors]

    for i in range(3):
        run = babelstream("translate", "--src", "en", "--tgt", "en-XA", f"Hello {i}")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip()
        assert "ERROR" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_results_of_submitted_requests(settings: Settings, worker: WorkerProcess) -> None:
    texts = ["Good morning", "Where is the train station?"]
    submitted = babelstream("submit", "--src", "en", "--tgt", "en-XA", *texts)
    assert submitted.returncode == 0, submitted.stderr
    ids = submitted.stdout.split()
    assert len(ids) == 2

    fetched = babelstream(
        "results", "--file", "-", "--wait", "60s", "--json", stdin=submitted.stdout
    )
    assert fetched.returncode == 0, fetched.stderr
    results = [json.loads(line) for line in fetched.stdout.splitlines()]
    assert [r["request_id"] for r in results] == ids
    assert [r["status"] for r in results] == ["ok", "ok"]

    again = babelstream("results", *ids)  # now without waiting: a bounded scan finds them
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [r["translation"] for r in results]

    unknown = uuid.uuid4().hex
    missing = babelstream("results", ids[0], unknown, "--since", "10m")
    assert missing.returncode == 1
    assert missing.stdout.splitlines() == [results[0]["translation"]]
    assert missing.stderr.strip().startswith(f"no result for {unknown} written since 20")


def test_a_dead_letter_with_a_request_id_gets_an_error_result(
    settings: Settings, worker: WorkerProcess
) -> None:
    """Another client's request over the UTF-8 limit (9,000 characters, 18,000 bytes) is
    dead-lettered, and its sender hears why at once instead of waiting out its timeout."""
    request_id = uuid.uuid4().hex
    doc = {
        "request_id": request_id,
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": "é" * 9000,
        "submitted_at": now_ms(),
        "timeout_ms": 600_000,
    }
    replies = ReplyBatch(request_ids=[request_id])
    with ResultListener(settings.kafka, [RESULTS_TOPIC]) as listener:
        producer = KafkaProducer(**kafka_python_options(settings.kafka, "test"))
        producer.send(REQUESTS_TOPIC, key=b"en_en-XA", value=json.dumps(doc).encode())
        producer.flush()
        producer.close()
        listener.collect(replies, timeout_s=60)
    result = replies.results[request_id]
    assert (result.status, result.reason) == ("error", "limit_exceeded")
    assert "18000 bytes" in (result.error or "")


def test_after_a_timeout_translate_says_whether_a_worker_serves_the_pair(
    settings: Settings, worker: WorkerProcess
) -> None:
    served = no_result_hint(settings, EN_XA)
    assert served.startswith("en_en-XA is served by babelstream (1 members)"), served
    unserved = no_result_hint(settings, Pair("en", "xx"))
    assert unserved.startswith("no model serves en_xx: add one to "), unserved
    assert "babelstream models add argos --pair en_xx" in unserved


def test_status_shows_the_worker_and_what_is_not_running(
    settings: Settings, worker: WorkerProcess
) -> None:
    run = babelstream("status", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    (group,) = [
        c for c in doc["components"] if c["name"] == "worker" and c["address"] == "babelstream"
    ]
    assert group["info"]["models"] == [DEMO_MODEL]
    member = group["info"]["members"][0]
    assert member["url"] == f"http://127.0.0.1:{worker.web_port}"
    assert member["assigned"][work_topic(DEMO_MODEL)] == list(range(settings.kafka.work_partitions))
    # the readiness page lands with the worker's rewrite; until then the worker says 404
    assert member["readiness"] in ("ready", "no readiness page (HTTP 404)")
    assert isinstance(group["info"]["total_lag"], int)
    (dashboard,) = [c for c in doc["components"] if c["name"] == "dashboard"]
    assert not dashboard["running"] and dashboard["detail"].startswith("not running")
    assert any(c["name"] == "sla" for c in doc["components"])


def test_bulk_run_reports_progress_lines_off_a_terminal(
    settings: Settings, worker: WorkerProcess, tmp_path: Path
) -> None:
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(
            f"Document {i}. It has two sentences.\n", encoding="utf-8"
        )
    out = tmp_path / "out.parquet"
    args = f"bulk run {corpus} --src en --tgt en-XA -o {out} --tenant {uuid.uuid4().hex[:8]}"
    state = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path / "state")}
    run = babelstream(*args.split(), env=state)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert "\r" not in run.stderr
    # two bars, as lines: segments (their count is known only once all are read) and documents
    assert any(line.startswith("segments: 6,") and "seg/s" in line for line in lines)
    assert any(line.startswith("documents: 3/3 (100%)") for line in lines)
    assert "ERROR" not in run.stderr
    assert pq.read_table(out).column("status").to_pylist() == ["ok"] * 3


def test_console_spans_go_to_stderr_not_into_submit_output(settings: Settings) -> None:
    run = babelstream(
        "submit",
        "--src",
        "en",
        "--tgt",
        "en-XA",
        "One",
        "Two",
        env={"BABELSTREAM_OBSERVABILITY__CONSOLE_EXPORTER": "true"},
    )
    assert run.returncode == 0, run.stderr
    ids = run.stdout.splitlines()
    assert len(ids) == 2 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids), run.stdout
    assert run.stderr.count('"name": "submit"') == 2
