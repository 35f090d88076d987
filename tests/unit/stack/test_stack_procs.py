"""PID files and process control, on a throw-away ``sleep`` process."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.stack.procs import (
    PidFile,
    ProcessRecord,
    cmdline,
    is_alive,
    is_running,
    spawn,
    terminate,
)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[ProcessRecord]:
    marker = str(tmp_path / "marker")
    record = spawn(
        [sys.executable, "-c", "import time; time.sleep(60)", marker],
        tmp_path / "log" / "sleep.log",
        tmp_path,
        marker,
    )
    yield record
    terminate(record, grace_s=1)


def test_pidfile_round_trip(tmp_path: Path) -> None:
    pidfile = PidFile(tmp_path / "run" / "x.pid")
    assert pidfile.read() is None
    record = ProcessRecord(pid=123, start_ticks=456, marker="/var/x.conf")
    pidfile.write(record)
    assert pidfile.read() == record
    pidfile.remove()
    assert pidfile.read() is None
    pidfile.remove()  # idempotent


@pytest.mark.parametrize("content", ["", "1234", "{not json", '{"pid": 1}', "[1, 2]"])
def test_foreign_or_corrupt_pidfile_reads_as_none(tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.pid"
    path.write_text(content)
    assert PidFile(path).read() is None


def test_spawned_process_is_ours(sleeper: ProcessRecord, tmp_path: Path) -> None:
    assert is_running(sleeper)
    assert sleeper.marker in cmdline(sleeper.pid)
    assert os.getpgid(sleeper.pid) == sleeper.pid  # own session, own process group
    assert (tmp_path / "log" / "sleep.log").exists()


def test_reused_pid_or_other_command_is_not_ours(sleeper: ProcessRecord) -> None:
    assert not is_running(ProcessRecord(sleeper.pid, sleeper.start_ticks + 1, sleeper.marker))
    assert not is_running(ProcessRecord(sleeper.pid, sleeper.start_ticks, "/other.conf"))
    assert is_alive(ProcessRecord(sleeper.pid, sleeper.start_ticks, "/other.conf"))


def test_terminate_is_graceful_and_reaps(sleeper: ProcessRecord) -> None:
    assert terminate(sleeper, grace_s=5) is True
    assert not is_alive(sleeper)
    assert not Path(f"/proc/{sleeper.pid}").exists()  # reaped, no zombie left


def test_terminate_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    marker = str(tmp_path / "stubborn")
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    record = spawn([sys.executable, "-c", code, marker], tmp_path / "s.log", tmp_path, marker)
    log = tmp_path / "s.log"
    while "ready" not in log.read_text():
        pass
    assert terminate(record, grace_s=0.5) is False
    assert not is_alive(record)


def test_dead_process_is_not_running(tmp_path: Path) -> None:
    record = spawn([sys.executable, "-c", "pass"], tmp_path / "d.log", tmp_path, "python")
    assert terminate(record, grace_s=5)
    assert not is_running(record)
