"""A job's resumable state: ``<state_dir>/<job_id>/manifest.json`` and ``results.jsonl``.

``results.jsonl`` gets one line per segment result as results arrive
(flushed per batch, so a killed run loses at most what it had not written
yet). A rerun reuses a segment's ``ok`` result only when it was made for the
same segment text (``source`` digest), so a changed input is translated
again; error and timeout results are retried. The manifest says what the job
is, where its output goes, and what the last run did.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.bulk import BulkError
from pipeline.bulk.assemble import SegmentOutcome
from pipeline.bulk.plan import SegmentTask
from pipeline.bulk.requests import check_job_id, text_digest
from pipeline.messages import TranslationResult, now_ms

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
RESULTS = "results.jsonl"
# Manifest fields that change what a translation is; a job keeps them for life.
_IDENTITY = ("pair", "tenant", "domain")


@dataclass(frozen=True)
class Progress:
    """Segment counts from the results file."""

    completed: int
    errors: int


def result_record(result: TranslationResult, text: str) -> dict[str, Any]:
    """The line stored for one segment result (``text``: the segment's source)."""
    return {
        "request_id": result.request_id,
        "doc_id": result.doc_id,
        "segment_index": result.segment_index,
        "source": text_digest(text),
        "status": result.status,
        "translation": result.translation,
        "error": result.error,
        "cache": result.cache,
        "completed_at": result.completed_at,
    }


class JobState:
    """The folder of one job."""

    def __init__(self, state_dir: Path, job_id: str) -> None:
        self.job_id = check_job_id(job_id)
        self.path = state_dir / job_id
        self.results_path = self.path / RESULTS
        self.manifest_path = self.path / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def manifest(self) -> dict[str, Any]:
        """The manifest (BulkError when the job has none)."""
        try:
            manifest: dict[str, Any] = json.loads(self.manifest_path.read_text(encoding="utf-8"))
            return manifest
        except FileNotFoundError:
            raise BulkError(f"no bulk job {self.job_id!r} under {self.path.parent}") from None

    def start(self, identity: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """Create or reopen the job for a run; refuse a job id reused with other settings."""
        self.path.mkdir(parents=True, exist_ok=True)
        now = now_ms()
        if self.exists():
            manifest = self.manifest()
            pid, host = manifest.get("pid"), manifest.get("host")
            if (manifest.get("state") == "running" and pid != os.getpid()
                    and process_alive(pid, host)):
                raise BulkError(f"job {self.job_id} is already running (pid {pid} on {host})")
            for key in _IDENTITY:
                if manifest.get(key) != identity.get(key):
                    raise BulkError(
                        f"job {self.job_id} was created with {key}={manifest.get(key)!r}, "
                        f"not {identity.get(key)!r}; choose another --job-id"
                    )
            manifest["runs"] = manifest.get("runs", 0) + 1
        else:
            manifest = {"job_id": self.job_id, "created_at": now, "runs": 1}
        manifest.update(identity, **fields, state="running", pid=os.getpid(),
                        host=socket.gethostname(), updated_at=now)
        self._write_manifest(manifest)
        return manifest

    def update(self, **fields: Any) -> None:
        """Change manifest fields (and ``updated_at``)."""
        manifest = self.manifest()
        manifest.update(fields, updated_at=now_ms())
        self._write_manifest(manifest)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        tmp = self.manifest_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")
        tmp.replace(self.manifest_path)

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        """Add result lines and flush them to the OS."""
        if not records:
            return
        with self.results_path.open("a", encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

    def records(self) -> Iterator[dict[str, Any]]:
        """Every stored result line; a line cut short by a crash is skipped."""
        try:
            lines = self.results_path.open(encoding="utf-8")
        except FileNotFoundError:
            return
        with lines:
            for number, line in enumerate(lines, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    log.warning("%s:%d: skipping an unreadable line", self.results_path, number)

    def completed(self, tasks: Iterable[SegmentTask]) -> dict[str, SegmentOutcome]:
        """``ok`` results made for these tasks' current texts, by request id."""
        wanted = {t.request_id: text_digest(t.text) for t in tasks}
        done: dict[str, SegmentOutcome] = {}
        for record in self.records():
            rid = record.get("request_id")
            if (record.get("status") == "ok" and rid in wanted
                    and record.get("source") == wanted[rid]
                    and record.get("translation") is not None):
                done[rid] = SegmentOutcome("ok", record["translation"])
        return done

    def progress(self) -> Progress:
        """Distinct segments with an ok result, and with only failed results."""
        ok: set[str] = set()
        failed: set[str] = set()
        for record in self.records():
            (ok if record.get("status") == "ok" else failed).add(record.get("request_id", ""))
        return Progress(completed=len(ok), errors=len(failed - ok))


def process_alive(pid: int | None, host: str | None) -> bool:
    """Whether the run that wrote the manifest still runs (unknown elsewhere: assume yes)."""
    if pid is None:
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
