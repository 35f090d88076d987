"""PID files and process control for the services ``babelstream up`` starts.

A PID file records the pid, the process start time (so a reused pid is never
mistaken for ours) and a marker its command line must contain. ``down`` only
signals a process that matches all three.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """What we know about a process we started."""

    pid: int
    start_ticks: int
    marker: str

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> ProcessRecord:
        """Parse a PID file's content; ``ValueError`` when it is not one of ours."""
        try:
            data = json.loads(text)
            return cls(
                pid=int(data["pid"]),
                start_ticks=int(data["start_ticks"]),
                marker=str(data["marker"]),
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"not a babelstream PID file: {text[:80]!r}") from exc


class PidFile:
    """A JSON PID file under ``var/run/``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ProcessRecord | None:
        """The recorded process, or None when the file is missing or unreadable."""
        try:
            return ProcessRecord.loads(self.path.read_text())
        except (OSError, ValueError):
            return None

    def write(self, record: ProcessRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(record.dumps())
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is index 0)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rpartition(")")[2].split()


def start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks since boot, None when there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def cmdline(pid: int) -> str:
    """The process's command line, space-joined ("" when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _reap(pid: int) -> None:
    """Collect a child's exit status so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded pid is alive (not a zombie) with the recorded start time."""
    fields = _stat_fields(record.pid)
    if fields is None:
        return False
    if fields[0] in ("Z", "X"):
        _reap(record.pid)
        return False
    return int(fields[19]) == record.start_ticks


def is_running(record: ProcessRecord) -> bool:
    """True when the recorded process is alive and its command line shows it is ours.

    (Right after start a service may be rewriting its process title, so start-up
    code that just spawned the process uses ``is_alive`` instead.)
    """
    return is_alive(record) and record.marker in cmdline(record.pid)


def spawn(cmd: list[str], log_path: Path, cwd: Path, marker: str) -> ProcessRecord:
    """Start ``cmd`` detached in its own session, stdout/stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ticks = start_ticks(proc.pid)
    record = ProcessRecord(
        pid=proc.pid, start_ticks=ticks if ticks is not None else -1, marker=marker
    )
    # Popen may return while the kernel is still setting up the exec'd image
    # (empty /proc/<pid>/cmdline); wait so callers see a consistent process.
    deadline = time.monotonic() + 2.0
    while not is_running(record) and is_alive(record) and time.monotonic() < deadline:
        time.sleep(0.01)
    return record


def _signal(record: ProcessRecord, sig: signal.Signals) -> None:
    """Signal the process group we created at spawn (or just the pid if it left it)."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(record.pid) == record.pid:
            os.killpg(record.pid, sig)
        else:
            os.kill(record.pid, sig)


def _wait_gone(record: ProcessRecord, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(record):
            return True
        time.sleep(0.1)
    return not is_alive(record)


def terminate(record: ProcessRecord, grace_s: float) -> bool:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL. True when it stopped gracefully.

    Callers check first that ``record`` is ours (``is_running``, or they just spawned it).
    """
    if not is_alive(record):
        return True
    _signal(record, signal.SIGTERM)
    if _wait_gone(record, grace_s):
        return True
    _signal(record, signal.SIGKILL)
    _wait_gone(record, 10.0)
    return False


def terminate_all(records: list[ProcessRecord], grace_s: float) -> list[bool]:
    """:func:`terminate` for several processes at once (SIGTERM to all, then wait).

    A KRaft quorum shuts down cleanly only while a majority of its nodes still
    runs, so the nodes are signalled together rather than one after another.
    """
    alive = [record for record in records if is_alive(record)]
    for record in alive:
        _signal(record, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    graceful = []
    for record in records:
        if record in alive and not _wait_gone(record, max(0.0, deadline - time.monotonic())):
            _signal(record, signal.SIGKILL)
            _wait_gone(record, 10.0)
            graceful.append(False)
        else:
            graceful.append(True)
    return graceful
