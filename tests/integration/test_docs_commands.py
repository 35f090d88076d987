"""The commands Getting started and the runbook show, run against the real stack.

Each command of those pages' code blocks runs as a user would type it (in a
scratch folder whose ``.venv`` is this one, the default worker ports replaced
by the test worker's), and must succeed. Commands that start long-running
services, stop the stack or change a group's offsets are listed in NOT_RUN
with the reason; every other command must run, so a command added to either
page is run here or named below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.settings import PROJECT_ROOT
from pipeline.stack.local_worker import WorkerProcess
from pipeline.stack.manager import Endpoints
from tests.docs_pages import DOCS, ShellCommand, shell_commands

pytestmark = pytest.mark.integration

GETTING_STARTED = DOCS / "getting-started.md"
RUNBOOK = DOCS / "runbook.md"
VENV = Path(sys.executable).parent.parent

# a command's start -> why this test does not run it
NOT_RUN: dict[str, str] = {
    "make ": "the whole install, demo or test suite (CI runs make test itself)",
    ".venv/bin/babelstream up": "the stack is already up (the stack fixture)",
    ".venv/bin/babelstream down": "would stop the stack other tests share",
    ".venv/bin/babelstream worker": "a long-running worker (the test starts its own)",
    "BABELSTREAM_WORKER__WEB_PORT=6067": "a second long-running worker",
    ".venv/bin/babelstream dashboard": "a long-running server (test_dashboard.py runs it)",
    ".venv/bin/babelstream sla  ": "the SLA job until Ctrl-C; the --until-idle form is run",
    ".venv/bin/babelstream dlq replay --id": "publishes dead letters again",
    ".venv/bin/babelstream dlq quarantine release": "publishes a quarantined record again",
    ".venv/bin/babelstream topics migrate --group": "copies records and commits a group's offsets "
    "(the group's workers must be stopped); the --dry-run form is run",
    "echo <request-id>": "a placeholder id",
    ".venv/bin/babelstream bulk status <job-id>": "a placeholder job id",
    ".venv/bin/babelstream bench sla": "a benchmark at its full size (make test-bench runs "
    "every bench at its smallest)",
    "grep sasl_username var/stack/roles/": "the secure stack's role files (test_roles.py "
    "checks them)",
}
# a runbook command that changes the group's offsets needs the group stopped
CHANGES_OFFSETS = "reset_group_offsets"


def _skipped(command: ShellCommand) -> bool:
    line = command.first_line.strip()
    return CHANGES_OFFSETS in command.text or any(line.startswith(s) for s in NOT_RUN)


def _runnable(page: Path) -> list[ShellCommand]:
    """The page's commands this test runs, each distinct one once, in page order."""
    seen: set[str] = set()
    runnable = []
    for command in shell_commands(page):
        if not _skipped(command) and command.text not in seen:
            seen.add(command.text)
            runnable.append(command)
    return runnable


@pytest.fixture(scope="module")
def worker(stack: Endpoints) -> Iterator[WorkerProcess]:
    """A worker of every registry pair, in the default group, on free ports."""
    log = PROJECT_ROOT / "var" / "log" / "test-docs-worker.log"
    with WorkerProcess(stack.settings, log_path=log) as w:
        yield w


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A folder to run the pages' commands in, with this virtualenv as its ``.venv``."""
    (tmp_path / ".venv").symlink_to(VENV)
    return tmp_path


def run_command(command: ShellCommand, cwd: Path, env: dict[str, str], timeout_s: float) -> str:
    """Run a page's command as a user types it (bash, pipefail); its stdout."""
    text = command.text
    started = time.monotonic()
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", text],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    # a pipeline that ends in grep finds nothing on a healthy worker: exit 1 is fine
    allowed = {0, 1} if re.search(r"\|\s*grep [^|]*$", text.splitlines()[0]) else {0}
    assert result.returncode in allowed, (
        f"{command.page}: `{command.first_line}` exited {result.returncode} after "
        f"{time.monotonic() - started:.0f}s\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout


def _on_worker(command: ShellCommand, worker: WorkerProcess) -> ShellCommand:
    """The command with the default worker ports replaced by the test worker's."""
    text = command.text.replace("127.0.0.1:6066", f"127.0.0.1:{worker.web_port}")
    text = text.replace("127.0.0.1:9464", f"127.0.0.1:{worker.metrics_port}")
    return ShellCommand(text, command.page)


def test_every_command_of_the_pages_is_run_or_named() -> None:
    for page in (GETTING_STARTED, RUNBOOK):
        commands = shell_commands(page)
        assert len(_runnable(page)) >= 8, page
        skipped = [c.first_line for c in commands if _skipped(c)]
        # every NOT_RUN entry still matches a command, so the list does not go stale
        assert skipped, page
    shown = [c.first_line for p in (GETTING_STARTED, RUNBOOK) for c in shell_commands(p)]
    unused = [s for s in NOT_RUN if not any(line.startswith(s) for line in shown)]
    assert not unused, f"NOT_RUN names commands the pages no longer show: {unused}"


def test_getting_started_sla_until_idle_ends(stack: Endpoints, scratch: Path) -> None:
    """The page's back-fill command ends by itself (here: reading from the topics' end,
    so it does not read every result the suite has written). It runs before this
    module starts its worker, whose ticks are input too."""
    (sla,) = [c for c in _runnable(GETTING_STARTED) if " sla " in c.first_line]
    assert "--until-idle" in sla.text
    env = {
        "BABELSTREAM_SLA__STARTING_OFFSETS": "latest",
        "BABELSTREAM_SLA__CHECKPOINT_DIR": str(scratch / "checkpoint"),
        "BABELSTREAM_SLA__HISTORY_DIR": str(scratch / "history"),
        "BABELSTREAM_SLA__LATE_HISTORY_DIR": str(scratch / "late"),
    }
    run_command(sla, scratch, env, timeout_s=300)


def test_getting_started_commands_run(worker: WorkerProcess, scratch: Path) -> None:
    for command in _runnable(GETTING_STARTED):
        if " sla " in command.first_line:
            continue  # below, once no worker ticks
        run_command(_on_worker(command, worker), scratch, {}, timeout_s=180)


def test_runbook_commands_run(worker: WorkerProcess, scratch: Path) -> None:
    for command in _runnable(RUNBOOK):
        run_command(_on_worker(command, worker), scratch, {}, timeout_s=180)
