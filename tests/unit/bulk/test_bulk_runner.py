"""The bulk runner against fake Kafka ends: flow control, resume, retries, output."""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.bulk import BulkCancelled, BulkInterrupted
from pipeline.bulk import readers as readers_mod
from pipeline.bulk import runner as runner_mod
from pipeline.bulk.plan import plan_batch
from pipeline.bulk.readers import CorpusReader
from pipeline.bulk.runner import JobSpec, run_job
from pipeline.bulk.state import JobState
from pipeline.contract.messages import CancelRequest, TranslationRequest, TranslationResult
from pipeline.contract.pairs import Pair, bulk_work_topic
from pipeline.settings import BulkSettings, Settings, load_settings

PAIR = Pair("en", "en-XA")


class FakeWorker:
    """Answers up to ``per_poll`` requests per poll; texts with FAIL get an error."""

    def __init__(self, per_poll: int = 3) -> None:
        self.per_poll = per_poll
        self.queue: deque[TranslationRequest] = deque()
        self.published: list[str] = []
        self.answered = 0
        self.max_outstanding = 0
        self.stop_after: int | None = None
        self.stop = threading.Event()
        self.topics: set[str] = set()
        self.reply_topics: set[str] = set()
        self.cancels: list[CancelRequest] = []
        self.requests: list[TranslationRequest] = []
        self.on_poll: list[object] = []

    def publisher(self, _settings: object, topic: str) -> FakeWorker:
        self.topics.add(topic)
        return self

    def results(self, _settings: object, _job_id: str, topic: str) -> FakeWorker:
        self.reply_topics.add(topic)
        return self

    def __enter__(self) -> FakeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def publish(self, records: list[tuple[bytes, bytes]]) -> None:
        for _key, value in records:
            request = TranslationRequest.from_json(value)
            assert request.reply_to == FakeReplyTopic.name
            self.requests.append(request)
            self.queue.append(request)
            self.published.append(request.request_id)
        self.max_outstanding = max(self.max_outstanding, len(self.queue))

    def poll(self, timeout_ms: int) -> list[TranslationResult]:
        out = []
        while self.queue and len(out) < self.per_poll:
            request = self.queue.popleft()
            failed = "FAIL" in request.text
            out.append(
                TranslationResult.for_request(
                    request,
                    status="error" if failed else "ok",
                    translation=None if failed else request.text.upper(),
                    error="boom" if failed else None,
                    cache="miss",
                )
            )
        self.answered += len(out)
        for hook in self.on_poll:
            hook()  # type: ignore[operator]
        if self.stop_after is not None and self.answered >= self.stop_after:
            self.stop.set()
        return out


class FakeReplyTopic:
    name = "translate.replies.fake"

    @classmethod
    def for_call(cls, *_args: object, **_kwargs: object) -> FakeReplyTopic:
        return cls()

    def __enter__(self) -> FakeReplyTopic:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> FakeWorker:
    fake = FakeWorker()
    monkeypatch.setattr(runner_mod, "BulkPublisher", fake.publisher)
    monkeypatch.setattr(runner_mod, "JobResults", fake.results)
    monkeypatch.setattr(runner_mod, "ReplyTopic", FakeReplyTopic)
    monkeypatch.setattr(
        runner_mod, "publish_cancels", lambda _settings, cancels: fake.cancels.extend(cancels)
    )
    monkeypatch.setattr(runner_mod, "model_id_for", lambda settings, pair: "fake-model")
    return fake


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    base = load_settings()
    return base.model_copy(
        update={"bulk": BulkSettings(state_dir=tmp_path / "state", max_in_flight=5, submit_chunk=2)}
    )


def corpus(tmp_path: Path, n: int = 12) -> CorpusReader:
    texts = [f"Doc {i} one. Doc {i} two!\n\nDoc {i} three" if i % 4 else "" for i in range(n)]
    texts[5] = "Good start. FAIL here."
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(n)], "text": texts}), path)
    return CorpusReader([path])


def segments_of(reader: CorpusReader) -> int:
    return sum(len(plan_batch("job-1", b, 1024).tasks) for b in reader.documents())


def spec(tmp_path: Path) -> JobSpec:
    return JobSpec(job_id="job-1", pair=PAIR, output=tmp_path / "out.parquet")


def test_flow_control_order_and_statuses(
    settings: Settings, worker: FakeWorker, tmp_path: Path
) -> None:
    docs = corpus(tmp_path)
    report = run_job(settings, spec(tmp_path), docs, progress=False)
    assert worker.topics == {bulk_work_topic("fake-model")}
    assert worker.reply_topics == {FakeReplyTopic.name}
    assert worker.max_outstanding <= settings.bulk.max_in_flight
    assert report.submitted == report.segments_total == len(worker.published) == 26
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.column("id").to_pylist() == [f"d{i}" for i in range(12)]
    rows = out.to_pylist()
    assert rows[1]["translation"] == "DOC 1 ONE. DOC 1 TWO!\n\nDOC 1 THREE"
    assert rows[0]["translation"] == "" and rows[0]["status"] == "ok"
    assert rows[5]["status"] == "partial"
    assert rows[5]["translation"] == "GOOD START. FAIL here."
    assert rows[5]["errors"] == [{"segment_index": 1, "status": "error", "error": "boom"}]
    assert report.doc_statuses == {"ok": 11, "partial": 1}
    assert JobState(settings.bulk.state_dir, "job-1").manifest()["state"] == "done"


def test_interrupted_run_resumes_without_redoing_finished_segments(
    settings: Settings, worker: FakeWorker, tmp_path: Path
) -> None:
    docs = corpus(tmp_path)
    worker.stop_after = 7
    with pytest.raises(BulkInterrupted):
        run_job(settings, spec(tmp_path), docs, stop=worker.stop, progress=False)
    state = JobState(settings.bulk.state_dir, "job-1")
    assert state.manifest()["state"] == "interrupted"
    first = list(state.records())
    done_first = {r["request_id"] for r in first if r["status"] == "ok"}
    failed_first = {r["request_id"] for r in first if r["status"] != "ok"}
    assert 6 <= len(done_first) < segments_of(docs)
    first_published = len(worker.published)

    worker.stop_after, worker.stop = None, threading.Event()
    report = run_job(settings, spec(tmp_path), docs, progress=False)
    republished = worker.published[first_published:]
    assert not set(republished) & done_first, "finished segments were submitted again"
    assert report.reused == len(done_first)
    # late results of the first run's unanswered requests may spare some re-sends
    assert report.submitted <= report.segments_total - len(done_first)
    lines = [r["request_id"] for r in state.records()]
    assert len(lines) == len(set(lines)) + len(failed_first)  # failures are retried
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert out[1]["translation"] == "DOC 1 ONE. DOC 1 TWO!\n\nDOC 1 THREE"
    assert [r["status"] for r in out].count("ok") == 11


def test_rerun_of_a_finished_job_only_retries_failures(
    settings: Settings, worker: FakeWorker, tmp_path: Path
) -> None:
    docs = corpus(tmp_path)
    run_job(settings, spec(tmp_path), docs, progress=False)
    before = len(worker.published)
    report = run_job(settings, spec(tmp_path), docs, progress=False)
    assert report.submitted == 1
    assert len(worker.published) == before + 1


def test_memory_window_bounds_what_is_read_ahead(
    settings: Settings, worker: FakeWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading pauses while the batches held for in-order assembly exceed window_bytes."""
    monkeypatch.setattr(readers_mod, "BATCH_ROWS", 4)
    n = 400
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": [f"Sentence {i}." for i in range(n)]}), path)
    reader = CorpusReader([path])
    batches_read = 0
    documents = reader.documents

    def counted():  # type: ignore[no-untyped-def]
        nonlocal batches_read
        for batch in documents():
            batches_read += 1
            yield batch

    monkeypatch.setattr(reader, "documents", counted)
    held: list[int] = []
    written = tmp_path / "out.parquet"
    original_write = runner_mod._OutputFile.write

    def write(self, rows):  # type: ignore[no-untyped-def]
        held.append(batches_read - sum(1 for _ in held) - 1)
        original_write(self, rows)

    monkeypatch.setattr(runner_mod._OutputFile, "write", write)
    tight = settings.model_copy(
        update={
            "bulk": settings.bulk.model_copy(
                update={"window_bytes": 1, "max_in_flight": 50, "submit_chunk": 50}
            )
        }
    )
    worker.per_poll = 50
    report = run_job(tight, JobSpec("job-w", PAIR, written), reader, progress=False)
    assert report.segments_total == n and len(held) == n // 4
    # window_bytes=1: one batch is read, finished and written before the next is read
    # (the in-flight cap is not what limits it: it could take 50 segments).
    assert max(held) <= 1
    assert pq.read_table(written).column("translation").to_pylist() == [
        f"SENTENCE {i}." for i in range(n)
    ]


def test_cancel_stops_a_running_job(
    settings: Settings, worker: FakeWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_mod, "CANCEL_CHECK_S", 0.0)
    docs = corpus(tmp_path)
    state = JobState(settings.bulk.state_dir, "job-1")
    worker.per_poll = 1
    worker.on_poll.append(lambda: worker.answered == 3 and state.request_cancel())
    with pytest.raises(BulkCancelled):
        run_job(settings, spec(tmp_path), docs, progress=False)
    assert state.manifest()["state"] == "cancelled"
    # stamped after the run's last publish, so the cancel covers everything it published
    (final,) = worker.cancels
    published_last = max(r.submitted_at for r in worker.requests)
    assert final.job_id == "job-1" and final.cancelled_at >= published_last
    assert not (tmp_path / "out.parquet").exists()
    # running it again resumes the job
    worker.on_poll.clear()
    worker.per_poll = 5
    report = run_job(settings, spec(tmp_path), docs, progress=False)
    assert report.reused >= 3 and state.manifest()["state"] == "done"
