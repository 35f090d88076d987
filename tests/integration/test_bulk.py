"""``babelstream bulk run`` end to end on the real stack with a real worker.

* A 2,000-document corpus (mostly short documents, empty and whitespace-only
  ones, emoji, CJK, CRLF paragraphs, documents longer than the model's limit
  and one longer than the message limit) comes back in input order, each
  translation equal to its segments' translations (read from
  ``translate.results``) joined with the original separators.
* A run killed midway (SIGKILL) and run again finishes the job without
  publishing or translating finished segments again (engine work counted by
  the results' ``cache`` field: ``miss`` means the engine translated it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bulk.plan import BatchPlan
from pipeline.bulk.segmenter import Segmentation
from pipeline.bulk.state import JobState
from pipeline.contract.messages import TranslationRequest, TranslationResult
from pipeline.contract.pairs import RESULTS_TOPIC, Pair, bulk_work_topic
from pipeline.sample_sentences import SentenceGenerator
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_MODEL, WorkerProcess
from tests.integration.helpers import TopicTail, plan_corpus

pytestmark = pytest.mark.integration

PAIR = Pair("en", "en-XA")
CJK = ["今天天气很好。", "我们去公园吧！", "日本語の文です。", "한국어 문장입니다."]
EMOJI = ["😀", "🎉", "👩‍👩‍👧", "🚀", "❤️"]


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log_path = PROJECT_ROOT / "var" / "log" / "test-bulk-worker.log"
    with WorkerProcess(settings, log_path=log_path) as w:
        yield w


def make_corpus(n: int, seed: int) -> list[str | None]:
    """Mostly 1-3 short sentences; the awkward cases spread through the corpus."""
    rng = random.Random(seed)
    gen = SentenceGenerator(seed, min_words=2, max_words=9)
    docs: list[str | None] = []
    for i in range(n):
        if i % 97 == 13:
            docs.append("")
        elif i % 131 == 7:
            docs.append("  \r\n\t")
        elif i % 53 == 5:
            docs.append(f"{rng.choice(CJK)}{rng.choice(CJK)}{i}号。")
        elif i % 41 == 3:
            docs.append(
                f"{gen.sentence()} {rng.choice(EMOJI)} {gen.sentence()}\r\n\r\n"
                f"{rng.choice(EMOJI)}{gen.sentence()}"
            )
        elif i % 400 == 250:  # longer than the model's limit (512 tokens), one sentence
            docs.append(" ".join(f"word{i}x{k}" for k in range(90)) + ".")
        elif i % 29 == 11:
            docs.append(f"  {gen.sentence()}\n\n{gen.sentence()}  \n")
        else:
            docs.append(" ".join(gen.sentence() for _ in range(rng.randint(1, 3))))
    # longer than the message limit (16 KiB): cut between words before publishing
    docs[n // 2] = "Start. " + " ".join(f"long{k}" for k in range(2100)) + " end."
    docs[n // 3] = None
    return docs


def write_input(path: Path, texts: list[str | None]) -> pa.Table:
    table = pa.table(
        {
            "id": [f"doc-{i:05d}" for i in range(len(texts))],
            "text": pa.array(texts, pa.string()),
            "group": [i % 7 for i in range(len(texts))],
        }
    )
    pq.write_table(table, path)
    return table


def bulk_command(src: Path, out: Path, tenant: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipeline",
        "bulk",
        "run",
        str(src),
        "--src",
        PAIR.source,
        "--tgt",
        PAIR.target,
        "--output",
        str(out),
        "--tenant",
        tenant,
        "--json",
        *extra,
    ]


def bulk_env(state_dir: Path) -> dict[str, str]:
    return {**os.environ, "BABELSTREAM_BULK__STATE_DIR": str(state_dir)}


def failures(state: JobState) -> list[str]:
    """The failed segment results of a job, for assertion messages."""
    return [
        f"{r['doc_id']}#{r['segment_index']}: {r['status']}: {r['error']}"
        for r in state.records()
        if r["status"] != "ok"
    ]


def documents_of(plans: list[BatchPlan]) -> Iterator[tuple[int, Segmentation | None, list[str]]]:
    """(corpus position, segmentation, its segments' request ids) of every document."""
    for plan in plans:
        for doc_index, segmentation in enumerate(plan.documents):
            ids = [t.request_id for t in plan.tasks if t.doc_index == doc_index]
            yield plan.first + doc_index, segmentation, ids


def results_by_id(records: list) -> dict[str, TranslationResult]:
    """First ok result per request id (at-least-once: duplicates are possible)."""
    out: dict[str, TranslationResult] = {}
    for record in records:
        result = TranslationResult.from_json(record.value)
        if result.status == "ok":
            out.setdefault(result.request_id, result)
    return out


def test_two_thousand_documents_in_order_and_faithful(
    settings: Settings, worker: WorkerProcess, tmp_path: Path
) -> None:
    texts = make_corpus(2000, seed=5)
    src, out = tmp_path / "corpus.parquet", tmp_path / "out.parquet"
    table = write_input(src, texts)
    tenant = f"bulk-{uuid.uuid4().hex[:8]}"
    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)

    started = time.monotonic()
    run = subprocess.run(
        bulk_command(src, out, tenant),
        env=bulk_env(tmp_path / "state"),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    elapsed = time.monotonic() - started
    assert report["errors"] == 0, failures(JobState(tmp_path / "state", report["job_id"]))

    plans = plan_corpus(report["job_id"], [src], settings.limits.max_text_bytes)
    wanted = {t.request_id for plan in plans for t in plan.tasks}
    assert report["segments_total"] == len(wanted) > 2000
    by_id = results_by_id(results.read_until(lambda rs: wanted <= set(results_by_id(rs)), 60))
    assert wanted <= set(by_id)

    output = pq.read_table(out)
    assert output.column_names == ["id", "text", "group", "translation", "status", "errors"]
    assert output.column("id").to_pylist() == table.column("id").to_pylist()
    assert output.column("text").to_pylist() == texts
    assert set(output.column("status").to_pylist()) == {"ok"}
    translations = output.column("translation").to_pylist()
    for position, segmentation, ids in documents_of(plans):
        if segmentation is None:
            assert translations[position] is None
            continue
        expected = segmentation.join([by_id[rid].translation or "" for rid in ids])
        assert translations[position] == expected, f"document {position}"
    assert translations[13] == "" and translations[7] == "  \r\n\t"
    assert "\r\n\r\n" in translations[3]
    long_doc = next(seg for position, seg, _ in documents_of(plans) if position == 1000)
    assert long_doc is not None and len(long_doc.segments) >= 3  # cut at the byte limit
    print(
        f"\n2,000 documents, {len(wanted)} segments in {elapsed:.1f}s "
        f"({len(wanted) / elapsed:.0f} segments/s, cache {report['cache']})"
    )


def test_killed_run_resumes_without_translating_finished_segments(
    settings: Settings, worker: WorkerProcess, tmp_path: Path
) -> None:
    texts = make_corpus(800, seed=9)
    src, out, state_dir = tmp_path / "c.parquet", tmp_path / "o.parquet", tmp_path / "state"
    table = write_input(src, texts)
    tenant = f"bulk-kill-{uuid.uuid4().hex[:8]}"
    command = bulk_command(src, out, tenant, "--max-in-flight", "150", "--job-id", tenant)
    plans = plan_corpus(tenant, [src], settings.limits.max_text_bytes)
    tasks = [t for plan in plans for t in plan.tasks]
    state = JobState(state_dir, tenant)

    first_log = tmp_path / "first-run.log"
    with first_log.open("wb") as log:
        first = subprocess.Popen(
            command,
            env=bulk_env(state_dir),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and first.poll() is None:
        if state.results_path.exists() and sum(1 for _ in state.records()) >= len(tasks) // 3:
            break
        time.sleep(0.05)
    assert first.poll() is None, (
        f"the first run ended (exit {first.returncode}) before it could be killed: "
        f"{first_log.read_text(errors='replace')[-3000:]}"
    )
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)

    lines_first = list(state.records())
    done_first = {r["request_id"] for r in lines_first if r["status"] == "ok"}
    assert 0 < len(done_first) < len(tasks)
    assert state.manifest()["state"] == "running"  # killed: no chance to say otherwise
    unfinished = {t.request_id: t.text for t in tasks if t.request_id not in done_first}

    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    published = TopicTail(settings.kafka.bootstrap_servers, bulk_work_topic(DEMO_MODEL))
    second = subprocess.run(
        command, env=bulk_env(state_dir), capture_output=True, text=True, timeout=300, check=False
    )
    assert second.returncode == 0, second.stderr[-3000:]
    report = json.loads(second.stdout.strip().splitlines()[-1])
    assert report["reused"] == len(done_first)
    assert report["completed"] == len(tasks) - len(done_first)
    assert report["errors"] == 0, failures(state)

    mine = tenant.encode()
    sent = published.read_until(
        lambda rs: sum(mine in r.value for r in rs) >= report["submitted"], 60
    )
    again = [TranslationRequest.from_json(r.value).request_id for r in sent if mine in r.value]
    assert len(again) == report["submitted"] > 0
    assert not set(again) & done_first, "finished segments were published again"
    # Engine work since the kill (cache == miss: the engine translated it) touched only
    # segments the first run had not finished, each distinct text at most once (copies in
    # flight at the kill and published again are answered by dedup and the caches).
    second_ids = {r["request_id"] for r in list(state.records())[len(lines_first) :]}
    assert not second_ids & done_first

    def job_results(records: list) -> list[TranslationResult]:
        return [TranslationResult.from_json(r.value) for r in records if mine in r.value]

    seen = results.read_until(lambda rs: second_ids <= {r.request_id for r in job_results(rs)}, 60)
    missed = [r.request_id for r in job_results(seen) if r.cache == "miss"]
    assert missed, "nothing was translated after the kill"
    assert set(missed) <= set(unfinished)
    assert len(missed) <= len(set(unfinished.values()))

    output = pq.read_table(out)
    assert output.column("id").to_pylist() == table.column("id").to_pylist()
    assert set(output.column("status").to_pylist()) == {"ok"}
    ok = {r["request_id"]: r["translation"] for r in state.records() if r["status"] == "ok"}
    translations = output.column("translation").to_pylist()
    for position, segmentation, ids in documents_of(plans):
        if segmentation is not None:
            assert translations[position] == segmentation.join([ok[rid] for rid in ids])
