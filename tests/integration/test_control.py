"""Operator controls on the real stack with a real worker.

Reply topics (a caller reads only its own results) and dead-letter replay
(exactly the chosen letters re-published, once).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.client import ReplyBatch, TranslationClient, build_requests
from pipeline.kafka_clients import admin_client
from pipeline.local_worker import DEMO_PAIR, WorkerProcess
from pipeline.messages import DeadLetter, TranslationRequest, TranslationResult, now_ms
from pipeline.pairs import DLQ_TOPIC, REQUESTS_TOPIC, RESULTS_TOPIC
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

# The worker (and the replaying CLI) refuse deadlines over 15 minutes.
MAX_TIMEOUT_MS = 900_000
ENV = {
    "BABELSTREAM_LIMITS__MAX_TIMEOUT_MS": str(MAX_TIMEOUT_MS),
    "BABELSTREAM_BULK__TIMEOUT_MS": str(MAX_TIMEOUT_MS),
}


@pytest.fixture(scope="module")
def settings(stack: object, monkeypatch_module: pytest.MonkeyPatch) -> Settings:
    for name, value in ENV.items():
        monkeypatch_module.setenv(name, value)
    return load_settings()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log_path = PROJECT_ROOT / "var" / "log" / "test-control-worker.log"
    with WorkerProcess(settings, log_path=log_path) as w:
        yield w


def test_a_reply_topic_carries_only_the_callers_results(
    settings: Settings, worker: WorkerProcess
) -> None:
    """Two callers at once, each on a topic of its own: neither reads a foreign result.

    The control: a caller on the shared results topic at the same time does read
    the others' results (so the counter can see them).
    """
    outcomes: dict[str, ReplyBatch] = {}

    def call(name: str, own_topic: bool) -> None:
        texts = [f"{name} sentence {i}" for i in range(40)]
        client = TranslationClient(settings.kafka, settings.replies if own_topic else None)
        with client:
            outcomes[name] = client.translate(build_requests(texts, DEMO_PAIR), timeout_s=120)

    threads = [threading.Thread(target=call, args=(f"caller{i}", i < 2)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in ("caller0", "caller1"):
        assert not outcomes[name].missing and outcomes[name].all_ok
        assert outcomes[name].foreign == 0
    assert outcomes["caller2"].foreign > 0, "the shared topic holds everyone's results"

    admin = admin_client(settings.kafka)
    try:
        leftovers = [t for t in admin.list_topics() if t.startswith(settings.replies.prefix)]
    finally:
        admin.close()
    assert not leftovers, "ephemeral reply topics are deleted after the call"


def test_a_named_reply_topic_is_kept(settings: Settings, worker: WorkerProcess) -> None:
    name = f"{settings.replies.prefix}client-{uuid.uuid4().hex[:8]}"
    with TranslationClient(settings.kafka, settings.replies, reply_topic=name) as client:
        replies = client.translate(build_requests(["Hello world"], DEMO_PAIR), timeout_s=60)
    assert replies.all_ok and replies.ordered[0].translation == "Ĥéļļö ŵöŕļð"  # type: ignore[union-attr]
    admin = admin_client(settings.kafka)
    try:
        assert name in admin.list_topics()
        admin.delete_topics([name])
    finally:
        admin.close()


def _request(marker: str, index: int, **changes: object) -> bytes:
    doc = {
        "request_id": f"{marker}-{index}",
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": f"Replay {index}",
        "submitted_at": now_ms(),
        **changes,
    }
    return json.dumps(doc).encode()


def test_dlq_replay_republishes_exactly_the_chosen_letters_once(
    settings: Settings, worker: WorkerProcess
) -> None:
    marker = uuid.uuid4().hex
    fixable = [_request(marker, i, timeout_ms=MAX_TIMEOUT_MS + 1000) for i in range(3)]
    unfixable = _request(marker, 3, text="é" * 9000)  # over the 16 KiB byte limit
    other = _request(marker, 4, timeout_ms=MAX_TIMEOUT_MS + 1000)  # not chosen
    broken = b"{" + marker.encode()  # not JSON, not chosen
    dlq = TopicTail(settings.kafka.bootstrap_servers, DLQ_TOPIC)
    producer = confluent_kafka.Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    for value in [*fixable, unfixable, other, broken]:
        producer.produce(REQUESTS_TOPIC, key=DEMO_PAIR.id.encode(), value=value)
    assert producer.flush(30) == 0

    def ours(records: list) -> list[DeadLetter]:
        return [DeadLetter.from_json(r.value) for r in records if marker.encode() in r.value]

    letters = ours(dlq.read_until(lambda rs: len(ours(rs)) >= 6))
    assert sorted(letter.reason for letter in letters) == ["limit_exceeded"] * 5 + ["not_json"]
    by_value = {letter.value: letter for letter in letters}
    chosen = [by_value[v.decode()] for v in [*fixable, unfixable]]
    ids = [f"{c.source_topic}:{c.partition}:{c.offset}" for c in chosen]
    args = ["dlq", "replay", "--fix-limits", "--restamp", "--json"]
    for letter_id in ids:
        args += ["--id", letter_id]

    requests = TopicTail(settings.kafka.bootstrap_servers, REQUESTS_TOPIC)
    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    dry = CliRunner().invoke(main, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["replayed"] == 3
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    assert (summary["replayed"], summary["refused"], summary["already_replayed"]) == (3, 1, 0)
    assert "limit_exceeded" in summary["refused_ids"][ids[3]]
    again = CliRunner().invoke(main, args)
    assert json.loads(again.output)["replayed"] == 0
    assert json.loads(again.output)["already_replayed"] == 3

    wanted = {f"{marker}-{i}" for i in range(3)}
    done = results.read_until(
        lambda rs: wanted <= {TranslationResult.from_json(r.value).request_id for r in rs}, 120
    )
    replayed = [
        TranslationRequest.from_json(r.value)
        for r in requests.drain(quiet_s=3)
        if marker.encode() in r.value
    ]
    assert sorted(r.request_id for r in replayed) == sorted(wanted), "exactly the chosen, once"
    assert {r.timeout_ms for r in replayed} == {MAX_TIMEOUT_MS}, "--fix-limits clamped them"
    statuses = {
        TranslationResult.from_json(r.value).status
        for r in done
        if TranslationResult.from_json(r.value).request_id in wanted
    }
    assert statuses == {"ok"}
