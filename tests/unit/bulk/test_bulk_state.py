"""The resumable job state: manifest, appended results, what counts as done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.bulk import BulkError
from pipeline.bulk.plan import SegmentTask
from pipeline.bulk.state import JobState, Progress, result_record
from pipeline.contract.messages import TranslationRequest, TranslationResult

IDENTITY = {"pair": "en_en-XA", "tenant": None, "domain": None}


def result(task: SegmentTask, status: str = "ok", translation: str | None = "T") -> dict:
    request = TranslationRequest(
        request_id=task.request_id,
        source_lang="en",
        target_lang="en-XA",
        text=task.text,
        submitted_at=1,
        job_id="job",
        doc_id="d",
        segment_index=task.segment_index,
    )
    return result_record(
        TranslationResult.for_request(
            request,
            status=status,
            translation=translation,  # type: ignore[arg-type]
            cache="miss",
            completed_at=2,
        ),
        task.text,
    )


def test_completed_reuses_only_ok_results_for_the_same_text(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY, output="out.parquet")
    a, b, c = (SegmentTask(f"job:d:{i}", 0, i, f"text {i}") for i in range(3))
    state.append([result(a), result(b, "error", None), result(c)])
    changed_c = SegmentTask(c.request_id, 0, 2, "edited text")
    done = state.completed([a, b, changed_c])
    assert set(done) == {a.request_id}
    assert done[a.request_id].translation == "T"
    progress = state.progress()
    assert (progress.completed, progress.errors) == (2, 1)


def test_lookups_of_many_segments_go_in_chunks(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY)
    tasks = [SegmentTask(f"job:d:{i}", 0, i, f"text {i}") for i in range(1300)]
    state.append([result(t) for t in tasks[::2]])
    reopened = JobState(tmp_path, "job")
    assert set(reopened.completed(tasks)) == {t.request_id for t in tasks[::2]}


def test_cancelled_segments_count_apart_and_are_retried(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY)
    a, b = (SegmentTask(f"job:d:{i}", 0, i, f"text {i}") for i in range(2))
    state.append([result(a, "cancelled", None), result(b, "error", None)])
    assert state.progress() == Progress(completed=0, errors=1, cancelled=1)
    assert state.completed([a, b]) == {}


def test_cancel_of_a_stopped_job_marks_it_at_once(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY)
    state.update(state="interrupted", pid=None)
    assert state.request_cancel()["state"] == "cancelled"
    assert state.cancel_requested()
    state.start(IDENTITY)  # running it again goes ahead
    assert not state.cancel_requested()


def test_reopening_counts_runs_and_refuses_other_settings(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY)
    assert state.start(IDENTITY)["runs"] == 2
    state.update(state="done")
    assert state.manifest()["state"] == "done"
    with pytest.raises(BulkError, match="tenant"):
        state.start({**IDENTITY, "tenant": "other"})


def test_unknown_job(tmp_path: Path) -> None:
    with pytest.raises(BulkError, match="no bulk job"):
        JobState(tmp_path, "nope").manifest()


def test_a_job_running_elsewhere_is_not_started_twice(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job")
    state.start(IDENTITY)
    state.update(pid=os.getppid())  # alive, and not us
    with pytest.raises(BulkError, match="already running"):
        state.start(IDENTITY)
    state.update(state="interrupted")
    state.start(IDENTITY)
