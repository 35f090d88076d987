"""The command samples of Getting started, Troubleshooting and the guides' quick starts
print what the pages show.

Each sample (a shell block followed by its output, or an output block opening
with ``$ command``) runs as a user types it, in page order in one scratch
folder whose ``.venv`` is this one, against the real stack and a worker on
the demo model. Its output, standard error included, must match the page's,
both masked (ids, figures, the project's folder, a result's cache level and
worker: ``tests/docs_pages.py``; the scratch folder is ``/path/to/your/folder``),
a ``...`` line standing for any lines. So a changed message or a changed command
fails here.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.settings import PROJECT_ROOT
from pipeline.stack.local_worker import WorkerProcess
from pipeline.stack.manager import Endpoints
from tests.docs_pages import DOCS, CommandSample, command_samples, output_differs
from tests.integration.test_docs_commands import VENV

pytestmark = pytest.mark.integration

PAGES = (
    DOCS / "getting-started.md",
    DOCS / "troubleshooting.md",
    DOCS / "guides" / "fidelity.md",
    DOCS / "guides" / "bulk.md",
    DOCS / "guides" / "controls.md",
    DOCS / "guides" / "models.md",
)
SCRATCH_ON_PAGES = "/path/to/your/folder"
SAMPLES = [sample for page in PAGES for sample in command_samples(page)]


@pytest.fixture(scope="module")
def worker(stack: Endpoints) -> Iterator[WorkerProcess]:
    """A worker of every registry pair, in the default group, on free ports."""
    log = PROJECT_ROOT / "var" / "log" / "test-docs-samples-worker.log"
    with WorkerProcess(stack.settings, log_path=log) as w:
        yield w


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for a page's samples (a later one reads what an earlier one wrote)."""
    folder = tmp_path_factory.mktemp("docs-samples")
    (folder / ".venv").symlink_to(VENV)
    return folder


def test_the_pages_show_samples() -> None:
    by_page = {page: command_samples(page) for page in PAGES}
    assert len(by_page[DOCS / "getting-started.md"]) >= 6
    assert all(by_page[page] for page in PAGES[1:])


def staged(sample: CommandSample, worker: WorkerProcess) -> dict[str, str]:
    """The settings that stage the fault a Troubleshooting sample shows, by its command:
    services that do not answer (nothing listens on ports 1-4 here) and ports the
    module's worker holds. Empty for every other sample."""
    if not sample.page.endswith("troubleshooting.md"):
        return {}
    nothing_listens = {
        "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "BABELSTREAM_STACK__HOME": str(PROJECT_ROOT / "var" / "test-docs-no-stack"),
        "BABELSTREAM_STACK__KAFKA_PORT": "1",
        "BABELSTREAM_STACK__REDIS_PORT": "2",
        "BABELSTREAM_DASHBOARD__PORT": "3",
        "BABELSTREAM_GATEWAY__PORT": "4",
    }
    taken = {
        "worker": {"BABELSTREAM_WORKER__WEB_PORT": str(worker.web_port)},
        "BABELSTREAM_WORKER__WEB_PORT=6067 .venv/bin/babelstream worker": {
            "BABELSTREAM_OBSERVABILITY__METRICS_PORT": str(worker.metrics_port)
        },
        "dashboard": {"BABELSTREAM_DASHBOARD__PORT": str(worker.web_port)},
    }
    command = sample.commands.strip()
    if command in (
        '.venv/bin/babelstream translate --src en --tgt en-XA "Hello world"',
        ".venv/bin/babelstream status",
    ):
        return nothing_listens
    return taken.get(command.removeprefix(".venv/bin/babelstream "), {})


def test_the_staged_faults_name_samples_of_the_page(worker: WorkerProcess) -> None:
    """A staged fault whose sample was reworded would silently stage nothing."""
    page = [s for s in SAMPLES if s.page.endswith("troubleshooting.md")]
    assert sum(bool(staged(s, worker)) for s in page) == 5


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.page}-{i}" for i, s in enumerate(SAMPLES)])
def test_each_sample_prints_what_its_page_shows(
    sample: CommandSample, worker: WorkerProcess, scratch: Path
) -> None:
    commands = sample.commands.replace("127.0.0.1:6066", f"127.0.0.1:{worker.web_port}")
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", commands],
        cwd=scratch,
        env={**os.environ, **staged(sample, worker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
    )
    differs = output_differs(sample.expected, result.stdout.replace(str(scratch), SCRATCH_ON_PAGES))
    assert differs is None, f"{sample.page}: `{commands.splitlines()[0]}`: {differs}"
