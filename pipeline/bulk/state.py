"""A job's resumable state: ``<state_dir>/<job_id>/manifest.json`` and ``results.sqlite``.

``results.sqlite`` gets one row per segment result as results arrive
(committed per batch, so a killed run loses at most the batch it had not
committed; WAL mode, so ``bulk status`` reads while a run writes). It is an
on-disk index: a run looks up earlier results one batch of segments at a
time, so resuming a huge job does not load its results into memory. A rerun
reuses a segment's ``ok`` result only when it was made for the same segment
text (``source`` digest), so a changed input is translated again; error,
timeout and cancelled results are retried. The manifest says what the job is,
where its output goes, and what the last run did.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.bulk import BulkError, BulkInputError
from pipeline.bulk.assemble import SegmentOutcome
from pipeline.bulk.plan import SegmentTask
from pipeline.bulk.requests import check_job_id, text_digest
from pipeline.contract.messages import TranslationResult, now_ms

MANIFEST = "manifest.json"
RESULTS = "results.sqlite"
# Manifest fields that change what a translation is; a job keeps them for life.
_IDENTITY = ("pair", "tenant", "domain")
_COLUMNS = (
    "request_id",
    "doc_id",
    "segment_index",
    "source",
    "status",
    "translation",
    "error",
    "cache",
    "completed_at",
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS results ({", ".join(_COLUMNS)});
CREATE INDEX IF NOT EXISTS results_by_request ON results (request_id);
"""
# SQLite's default limit on bound parameters is 999 (older builds); stay below it.
_LOOKUP_CHUNK = 500


@dataclass(frozen=True)
class Progress:
    """Segment counts from the results."""

    completed: int
    errors: int
    cancelled: int = 0


def result_record(result: TranslationResult, text: str) -> dict[str, Any]:
    """The row stored for one segment result (``text``: the segment's source)."""
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
        self._connection: sqlite3.Connection | None = None

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def manifest(self) -> dict[str, Any]:
        """The manifest (BulkError when the job has none)."""
        try:
            manifest: dict[str, Any] = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BulkInputError(f"no bulk job {self.job_id!r} under {self.path.parent}") from None
        return manifest

    def start(self, identity: dict[str, Any], **fields: Any) -> dict[str, Any]:
        """Create or reopen the job for a run; refuse a job id reused with other settings."""
        self.path.mkdir(parents=True, exist_ok=True)
        now = now_ms()
        if self.exists():
            manifest = self.manifest()
            pid, host = manifest.get("pid"), manifest.get("host")
            if (
                manifest.get("state") == "running"
                and pid != os.getpid()
                and process_alive(pid, host)
            ):
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
        manifest.pop("cancel_requested_at", None)  # a new run after a cancel goes ahead
        manifest.update(
            identity,
            **fields,
            state="running",
            pid=os.getpid(),
            host=socket.gethostname(),
            updated_at=now,
        )
        self._write_manifest(manifest)
        return manifest

    def update(self, **fields: Any) -> None:
        """Change manifest fields (and ``updated_at``)."""
        manifest = self.manifest()
        manifest.update(fields, updated_at=now_ms())
        self._write_manifest(manifest)

    def _write_manifest(self, manifest: dict[str, Any]) -> None:
        # A name of the writer's own: `bulk cancel` may write while a run does.
        tmp = self.manifest_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")
        tmp.replace(self.manifest_path)

    def cancellable(self) -> dict[str, Any]:
        """The manifest of a job that may be cancelled; :class:`BulkError` for a finished one
        (every segment has its result: cancelling it would only mislabel it)."""
        manifest = self.manifest()
        if manifest.get("state") == "done":
            raise BulkError(f"job {self.job_id} is done: nothing is left to cancel")
        return manifest

    def request_cancel(self) -> dict[str, Any]:
        """Mark the job cancelled: a running run stops, a stopped job stays stopped."""
        manifest = self.manifest()
        alive = manifest.get("state") == "running" and process_alive(
            manifest.get("pid"), manifest.get("host")
        )
        fields: dict[str, Any] = {"cancel_requested_at": now_ms()}
        if not alive:
            fields["state"] = "cancelled"
        self.update(**fields)
        return self.manifest()

    def cancel_requested(self) -> bool:
        """Whether ``bulk cancel`` asked the running job to stop."""
        try:
            return "cancel_requested_at" in self.manifest()
        except (BulkError, json.JSONDecodeError):
            return False

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the job's connection (opened once, on first use)."""
        if self._connection is None:
            self.path.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.results_path, timeout=30)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(_SCHEMA)
            self._connection = connection
        with self._connection:  # committed on success, rolled back on error
            yield self._connection

    def close(self) -> None:
        """Close the results database (reopened on next use)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        """Store result rows (one transaction)."""
        if not records:
            return
        placeholders = ", ".join(f":{c}" for c in _COLUMNS)
        rows = [{c: record.get(c) for c in _COLUMNS} for record in records]
        with self._db() as db:
            db.executemany(f"INSERT INTO results VALUES ({placeholders})", rows)

    def records(self) -> Iterator[dict[str, Any]]:
        """Every stored result row, in the order stored."""
        if not self.results_path.exists():
            return
        with self._db() as db:
            cursor = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM results ORDER BY rowid")
            for row in cursor:
                yield dict(zip(_COLUMNS, row, strict=True))

    def completed(self, tasks: Iterable[SegmentTask]) -> dict[str, SegmentOutcome]:
        """``ok`` results made for these tasks' current texts, by request id."""
        wanted = {t.request_id: text_digest(t.text) for t in tasks}
        if not wanted or not self.results_path.exists():
            return {}
        done: dict[str, SegmentOutcome] = {}
        ids = list(wanted)
        with self._db() as db:
            for start in range(0, len(ids), _LOOKUP_CHUNK):
                chunk = ids[start : start + _LOOKUP_CHUNK]
                marks = ", ".join("?" * len(chunk))
                cursor = db.execute(
                    "SELECT request_id, source, translation FROM results WHERE status = 'ok' "
                    f"AND translation IS NOT NULL AND request_id IN ({marks})",
                    chunk,
                )
                for rid, source, translation in cursor:
                    if source == wanted[rid]:
                        done.setdefault(rid, SegmentOutcome("ok", translation))
        return done

    def progress(self) -> Progress:
        """Distinct segments: with an ok result, with only failures, cancelled (and not ok)."""
        if not self.results_path.exists():
            return Progress(0, 0)
        with self._db() as db:
            completed, failed, cancelled = db.execute(
                "SELECT COALESCE(SUM(ok > 0), 0), COALESCE(SUM(ok = 0 AND cancelled = 0), 0), "
                "COALESCE(SUM(ok = 0 AND cancelled > 0), 0) FROM ("
                "SELECT SUM(status = 'ok') AS ok, SUM(status = 'cancelled') AS cancelled "
                "FROM results GROUP BY request_id)"
            ).fetchone()
        return Progress(completed=completed, errors=failed, cancelled=cancelled)


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
