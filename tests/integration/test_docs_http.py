"""The ``curl`` calls of "The HTTP API by example", run as the page shows them.

Each shell block of the page runs in bash against a real gateway (the page's
address replaced by the test gateway's), a worker on the demo model and the
real stack, and must print the text block that follows it, so a page that
drifts from the gateway fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.gateway.process import GatewayProcess
from pipeline.settings import PROJECT_ROOT
from pipeline.stack.local_worker import WorkerProcess
from pipeline.stack.manager import Endpoints
from tests.docs_pages import DOCS

pytestmark = pytest.mark.integration

PAGE = DOCS / "guides" / "http-api.md"
# a shell block and the output the page shows under it
_CALL = re.compile(r"^```sh\n(.*?)^```\n\n```text\n(.*?)^```", re.M | re.S)
# the gateway's address on the page (LibreTranslate's default port)
PAGE_URL = "http://127.0.0.1:5000"
LOGS = PROJECT_ROOT / "var" / "log"


def _calls() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    calls: list[tuple[str, str]] = _CALL.findall(text)
    assert len(calls) == text.count("```sh"), "a shell block without its output"
    return calls


CALLS = _calls()


@pytest.fixture(scope="module")
def gateway(stack: Endpoints) -> Iterator[GatewayProcess]:
    log = LOGS / "test-docs-http-worker.log"
    env = {"BABELSTREAM_GATEWAY__INSTANCE_ID": f"docs-{uuid.uuid4().hex[:8]}"}
    with (
        WorkerProcess(stack.settings, log_path=log),
        GatewayProcess(stack.settings, log_path=LOGS / "test-docs-http.log", env=env) as g,
    ):
        yield g


@pytest.mark.parametrize(
    ("commands", "expected"), CALLS, ids=[f"block-{i}" for i in range(len(CALLS))]
)
def test_each_call_prints_what_the_page_shows(
    stack: Endpoints, gateway: GatewayProcess, tmp_path: Path, commands: str, expected: str
) -> None:
    if "babelstream keys" in commands and stack.settings.kafka.security_protocol != "PLAINTEXT":
        pytest.skip("the page's key command reaches a plain local stack")
    script = commands.replace(PAGE_URL, gateway.url).replace(
        ".venv/bin/", f"{PROJECT_ROOT / '.venv' / 'bin'}/"
    )
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env={
            **os.environ,
            "BABELSTREAM_KAFKA__BOOTSTRAP_SERVERS": stack.bootstrap_servers,
            "BABELSTREAM_REDIS__URL": stack.redis_url,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.rstrip().replace(gateway.url, PAGE_URL) == expected.rstrip()
