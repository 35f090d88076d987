"""Whether the SLA job runs: ``babelstream sla`` marks its run beside its checkpoint.

The checkpoint's last micro-batch alone cannot tell a stopped job from a
running one: a job with no input commits nothing for minutes, and a stopped
one looks the same for as long. So the command writes
``<checkpoint>.run.json`` (its pid and host) as it starts and adds the time it
stopped as it ends; ``babelstream status`` reads it.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.bulk.state import process_alive
from pipeline.cli.durations import utc_iso
from pipeline.contract.messages import now_ms


def marker_path(checkpoint_dir: Path) -> Path:
    """Where a run of the job checkpointing in ``checkpoint_dir`` is marked."""
    return checkpoint_dir.parent / f"{checkpoint_dir.name}.run.json"


@contextmanager
def marked_run(checkpoint_dir: Path) -> Iterator[None]:
    """Mark this process's run of the job for the block, and its stop after it."""
    path = marker_path(checkpoint_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    run = {"pid": os.getpid(), "host": socket.gethostname(), "started_ms": now_ms()}
    _write(path, run)
    try:
        yield
    finally:
        _write(path, {**run, "stopped_ms": now_ms()})


def _write(path: Path, content: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(content), encoding="utf-8")
    tmp.replace(path)


@dataclass(frozen=True)
class RunState:
    """What the marker says: ``running`` None when there is no (readable) marker."""

    running: bool | None
    detail: str


def run_state(checkpoint_dir: Path) -> RunState:
    """The state of the job's last marked run (on another host: as marked)."""
    try:
        run = json.loads(marker_path(checkpoint_dir).read_text(encoding="utf-8"))
        pid, host, stopped = run.get("pid"), run.get("host"), run.get("stopped_ms")
    except (OSError, ValueError, AttributeError):
        return RunState(None, "no run marker")
    if stopped is not None:
        return RunState(False, f"stopped at {utc_iso(stopped)}")
    if process_alive(pid, host):
        return RunState(True, f"pid {pid} on {host}")
    return RunState(False, f"pid {pid} ended without stopping")
