"""The programs of "Requests from your own code", run as the page shows them.

Each Python block of the page is run as a script by this virtualenv's Python
against the real stack and a worker, and must print exactly the text block
that follows it, so a page that drifts from the software fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.kafka.check import admin_client
from pipeline.settings import PROJECT_ROOT
from pipeline.stack.local_worker import WorkerProcess
from pipeline.stack.manager import Endpoints
from tests.docs_pages import DOCS

pytestmark = pytest.mark.integration

PAGE = DOCS / "guides" / "own-code.md"
# a program and the output the page shows under it
_PROGRAM = re.compile(r"^```python\n(.*?)^```\n\n```text\n(.*?)^```", re.M | re.S)
# the address the page's plain kafka-python program names
PAGE_BROKERS = "127.0.0.1:9092"
PAGE_REPLY_TOPIC = "translate.replies.my-app"


def _programs() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    programs: list[tuple[str, str]] = _PROGRAM.findall(text)
    assert len(programs) == text.count("```python"), "a Python block without its output"
    return programs


@pytest.fixture(scope="module")
def worker(stack: Endpoints) -> Iterator[WorkerProcess]:
    log = PROJECT_ROOT / "var" / "log" / "test-docs-code-worker.log"
    with WorkerProcess(stack.settings, log_path=log) as w:
        yield w


@pytest.fixture
def reply_topic_removed(stack: Endpoints) -> Iterator[None]:
    yield
    admin = admin_client(stack.settings.kafka, "tests")
    try:
        if PAGE_REPLY_TOPIC in admin.list_topics():
            admin.delete_topics([PAGE_REPLY_TOPIC])
    finally:
        admin.close()


@pytest.mark.parametrize(("program", "expected"), _programs(), ids=["client", "kafka-python"])
@pytest.mark.usefixtures("reply_topic_removed")
def test_each_program_prints_what_the_page_shows(
    stack: Endpoints, worker: WorkerProcess, tmp_path: Path, program: str, expected: str
) -> None:
    if PAGE_BROKERS in program and stack.settings.kafka.security_protocol != "PLAINTEXT":
        pytest.skip("the page's plain kafka-python program speaks PLAINTEXT")
    script = tmp_path / "program.py"
    script.write_text(program.replace(PAGE_BROKERS, stack.bootstrap_servers), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == expected
