"""``babelstream bulk status`` on a job state made by hand (no services)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from pipeline.bulk.state import JobState
from pipeline.cli.main import main


def test_status_reports_counts_and_an_interrupted_run(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job-1")
    state.start(
        {"pair": "en_en-XA", "tenant": None, "domain": None},
        documents=2,
        segments_total=5,
        output="/out.parquet",
    )
    state.update(pid=2**22 + 12345)  # a run that died without saying so
    state.append(
        [
            {"request_id": "a", "status": "ok", "translation": "x"},
            {"request_id": "b", "status": "error", "translation": None},
            {"request_id": "c", "status": "timeout", "translation": None},
            {"request_id": "c", "status": "ok", "translation": "y"},
            {"request_id": "d", "status": "cancelled", "translation": None},
        ]
    )
    env = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["bulk", "status", "job-1", "--json"], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["state"] == "interrupted"
    assert (
        doc["segments_total"],
        doc["segments_completed"],
        doc["segments_errors"],
        doc["segments_cancelled"],
        doc["segments_pending"],
    ) == (5, 2, 1, 1, 1)
    assert doc["output"] == "/out.parquet"

    text = CliRunner().invoke(main, ["bulk", "status", "job-1"], env=env)
    assert "2/5 completed (40.0%), 1 errors, 1 cancelled, 1 pending" in text.output


def test_status_of_an_unknown_job(tmp_path: Path) -> None:
    env = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["bulk", "status", "nope"], env=env)
    assert result.exit_code == 2, "a job id that names no job is a usage mistake"
    assert "no bulk job" in result.output


def test_cancel_of_an_unknown_job(tmp_path: Path) -> None:
    env = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["bulk", "cancel", "nope"], env=env)
    assert result.exit_code == 2
    assert "no bulk job 'nope'" in result.output


def test_cancel_of_a_finished_job_is_refused_and_keeps_its_state(tmp_path: Path) -> None:
    state = JobState(tmp_path, "job-done")
    state.start({"pair": "en_en-XA", "tenant": None, "domain": None})
    state.update(state="done", pid=None)
    env = {"BABELSTREAM_BULK__STATE_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["bulk", "cancel", "job-done"], env=env)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "job job-done is done" in result.output
    assert state.manifest()["state"] == "done"
    assert not state.cancel_requested()
