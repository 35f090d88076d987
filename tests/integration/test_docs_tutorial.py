"""The commands of "A real language pair in 10 minutes", run as the page shows them.

The internet is the one thing the page needs that the tests do not have: the
Argos index it downloads from is a local server here, listing a package built
in the test (the demo model's files in Argos's layout, labelled English →
German). Every other command runs as printed; the worker and the gateway the
page starts in terminals of their own are started by the test, on free ports.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipeline.contract.pairs import Pair
from pipeline.gateway.process import GatewayProcess
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import WorkerProcess
from tests.docs_pages import DOCS, ShellCommand, shell_commands
from tests.integration.test_docs_commands import VENV, run_command
from tests.model_archives import ARGOS_METADATA, argos_package, serving

pytestmark = pytest.mark.integration

TUTORIAL = DOCS / "guides" / "real-pair.md"
LOGS = PROJECT_ROOT / "var" / "log"
# what the page runs that the test does not: the install (CI ran it) and the stack (up)
NOT_RUN = ("make install", ".venv/bin/babelstream up")


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


def test_the_tutorial_adds_a_pair_and_translates_it_through_kafka_and_the_gateway(
    settings: Settings, tmp_path: Path
) -> None:
    scratch = tmp_path / "clone"
    (scratch / "models").mkdir(parents=True)
    (scratch / ".venv").symlink_to(VENV)
    shutil.copyfile(PROJECT_ROOT / "models" / "registry.toml", scratch / "models" / "registry.toml")
    (scratch / "models" / "demo").symlink_to(PROJECT_ROOT / "models" / "demo")
    registry = scratch / "models" / "registry.toml"
    german = {**ARGOS_METADATA, "to_code": "de", "to_name": "German"}
    package = argos_package(tmp_path / "translate-en_de-1_0.argosmodel", german)
    commands = shell_commands(TUTORIAL)
    assert [c.first_line for c in commands if c.first_line.startswith(NOT_RUN)], "stale NOT_RUN"
    with serving({"/translate-en_de-1_0.argosmodel": package.read_bytes()}) as server:
        entry = {**german, "links": [server.url("translate-en_de-1_0.argosmodel")]}
        server.files["/index.json"] = json.dumps([entry]).encode()
        env = {
            "BABELSTREAM_ENGINE__REGISTRY": str(registry),
            "BABELSTREAM_MODELS__ARGOS_INDEX": server.url("index.json"),
            "BABELSTREAM_MODELS__DOWNLOAD_DIR": str(scratch / "var" / "downloads"),
        }
        worker: WorkerProcess | None = None
        gateway: GatewayProcess | None = None
        outputs: dict[str, str] = {}
        try:
            for command in commands:
                line = command.first_line
                if line.startswith(NOT_RUN):
                    continue
                if line.endswith("babelstream worker"):
                    worker = WorkerProcess(
                        settings,
                        log_path=LOGS / "test-tutorial-worker.log",
                        env={**env, "BABELSTREAM_WORKER__STATIC_MEMBERSHIP": "false"},
                        probe_pair=Pair("en", "de"),
                    ).start()
                    continue
                if line.endswith("babelstream gateway"):
                    gateway = GatewayProcess(
                        settings, log_path=LOGS / "test-tutorial-gateway.log", env=env
                    ).start()
                    continue
                if gateway is not None:
                    text = command.text.replace("http://127.0.0.1:5000", gateway.url)
                    command = ShellCommand(text, command.page)
                outputs[line] = run_command(command, scratch, env, timeout_s=180)
        finally:
            if gateway is not None:
                gateway.stop()
            if worker is not None:
                worker.stop()
    assert worker is not None and gateway is not None, "the page starts a worker and a gateway"
    (added,) = [json.loads(o) for line, o in outputs.items() if " models add " in line]
    assert added["pairs"] == ["en_de"] and (scratch / "models" / "argos-en-de").is_dir()
    (listed,) = [o for line, o in outputs.items() if line.endswith("models list")]
    assert "argos:translate-en_de@1.0" in listed and "babelstream-demo-enxa" in listed
    (kafka,) = [o for line, o in outputs.items() if " translate " in line]
    (http,) = [o for line, o in outputs.items() if line.startswith("curl")]
    # the package holds the demo model, so "German" here is the pseudo-locale
    assert kafka.strip() == json.loads(http)["translatedText"] != "The train leaves at nine."
