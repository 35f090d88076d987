"""A worker restarted with other models, within the session timeout, serves all of them.

Static membership gives a member restarted within the session timeout its old
assignment back. A worker whose models changed must not get it: its instance
id carries a digest of what it subscribes to, so it joins as a new member, and
it says it is ready only once every partition of its topics has a member.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.client import RequestOptions, TranslationClient, build_requests
from pipeline.contract.pairs import REQUESTS_TOPIC, Pair, bulk_work_topic, work_topic
from pipeline.kafka.groups import AssignmentCheck
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess

pytestmark = pytest.mark.integration

BACK = Pair(DEMO_PAIR.target, DEMO_PAIR.source)
# one model directory registered as two models: each pair gets work topics of its own
ENTRY = """
[[pair]]
id = "{pair}"
model = "{model_dir}"
model_id = "{model_id}"
tokenizer = "spm.model"
target_prefix = ["{prefix}"]
source_suffix = ["</s>"]
suppress_tokens = [">>en<<", ">>en-XA<<"]
"""


def registry(path: Path, pairs: list[tuple[Pair, str]]) -> Path:
    path.write_text(
        "".join(
            ENTRY.format(
                pair=pair.id,
                model_dir=PROJECT_ROOT / "models" / "demo",
                model_id=model_id,
                prefix=f">>{pair.target}<<",
            )
            for pair, model_id in pairs
        )
    )
    return path


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture
def registries(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    one = registry(tmp_path / "one.toml", [(DEMO_PAIR, "subs-demo-a")])
    two = registry(tmp_path / "two.toml", [(DEMO_PAIR, "subs-demo-a"), (BACK, "subs-demo-b")])
    yield one, two


def translate_both(settings: Settings) -> dict[str, str]:
    requests = [
        *build_requests(["Hello there."], DEMO_PAIR, RequestOptions(timeout_ms=120_000)),
        *build_requests(["Ĥéļļö ţĥéŕé."], BACK, RequestOptions(timeout_ms=120_000)),
    ]
    with TranslationClient(settings.kafka, settings.limits, replies=settings.replies) as client:
        replies = client.translate(requests, timeout_s=30)
    return {r.pair: r.status for r in replies.ordered if r is not None}


def test_a_restart_with_more_models_within_the_session_timeout_serves_every_pair(
    settings: Settings, registries: tuple[Path, Path]
) -> None:
    one, two = registries
    log_path = PROJECT_ROOT / "var" / "log" / "test-subscription-worker.log"
    first = WorkerProcess(
        settings, log_path=log_path, env={"BABELSTREAM_ENGINE__REGISTRY": str(one)}
    ).start()
    try:
        assert translate_both(settings) == {DEMO_PAIR.id: "ok", BACK.id: "error"}
    finally:
        first.stop()
    # the same host and web port (the same instance id base), other models, at once
    second = WorkerProcess(
        settings,
        log_path=log_path,
        env={
            "BABELSTREAM_ENGINE__REGISTRY": str(two),
            "BABELSTREAM_WORKER__WEB_PORT": str(first.web_port),
        },
        instance_id=first.instance_id,
    )
    topics = [
        REQUESTS_TOPIC,
        *(f(m) for m in ("subs-demo-a", "subs-demo-b") for f in (work_topic, bulk_work_topic)),
    ]
    check = AssignmentCheck(settings.kafka, "babelstream")
    began = time.monotonic()
    ready_seen: list[dict[str, int]] = []
    starter = threading.Thread(target=second.start, daemon=True)
    starter.start()
    try:
        while starter.is_alive() and time.monotonic() - began < 120:
            readiness = second.readiness() or {}
            if readiness.get("ready"):
                # the moment it says ready, every partition of its topics has a member
                ready_seen.append(check.unassigned(topics))
                break
            time.sleep(0.1)
        starter.join(120)
        assert ready_seen == [{}], ready_seen
        assert translate_both(settings) == {DEMO_PAIR.id: "ok", BACK.id: "ok"}
        assert second.returncode is None
    finally:
        check.close()
        second.stop()
