"""End to end on the real stack: router, DLQ, worker, caches, deadlines, crashes."""

from __future__ import annotations

import collections
import json
import random
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
from kafka.consumer.fetcher import ConsumerRecord

from pipeline.client import TranslationClient, build_requests
from pipeline.contract.messages import DeadLetter, TranslationRequest, TranslationResult, now_ms
from pipeline.contract.pairs import DLQ_TOPIC, REQUESTS_TOPIC, RESULTS_TOPIC, Pair
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack import manager
from pipeline.stack.local_worker import WorkerProcess
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

EN_XA = Pair("en", "en-XA")


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


WORKER_LOG = PROJECT_ROOT / "var" / "log" / "test-worker.log"


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    with WorkerProcess(settings, log_path=WORKER_LOG) as w:
        yield w


def results_by_id(records: list) -> dict[str, list[TranslationResult]]:
    by_id: dict[str, list[TranslationResult]] = collections.defaultdict(list)
    for record in records:
        result = TranslationResult.from_json(record.value)
        by_id[result.request_id].append(result)
    return by_id


def test_translate_hello_world(settings: Settings, worker: WorkerProcess) -> None:
    with TranslationClient(settings.kafka) as client:
        replies = client.translate(build_requests(["Hello world"], EN_XA), timeout_s=60)
    (result,) = replies.ordered
    assert result is not None and result.status == "ok"
    assert result.translation == "Ĥéļļö ŵöŕļð"
    assert result.model and result.worker


def test_third_party_client_and_dead_letters(settings: Settings, worker: WorkerProcess) -> None:
    """A foreign producer's requests are routed; every bad input lands in the DLQ."""
    marker = uuid.uuid4().hex
    good = {
        "request_id": f"{marker}-good",
        "source_lang": "en",
        "target_lang": "en-XA",
        "text": "Good morning",
        "submitted_at": now_ms(),
    }
    bad_inputs = {
        "not_json": b"{" + marker.encode(),
        "not_utf8": b"\xff\xfe" + marker.encode(),
        "invalid": json.dumps({**good, "request_id": f"{marker}-nofield", "text": None}).encode(),
        "bad_tag": json.dumps(
            {**good, "request_id": f"{marker}-tag", "source_lang": "en_US"}
        ).encode(),
        "limit_exceeded": json.dumps(
            {**good, "request_id": f"{marker}-big", "text": "é" * 9000}
        ).encode(),
    }
    unsupported = {**good, "request_id": f"{marker}-unsupported", "target_lang": "de"}
    dlq, results = (
        TopicTail(settings.kafka.bootstrap_servers, DLQ_TOPIC),
        TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC),
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": settings.kafka.bootstrap_servers})
    for doc in (good, unsupported):
        producer.produce(REQUESTS_TOPIC, key=b"en_en-XA", value=json.dumps(doc).encode())
    for value in bad_inputs.values():
        producer.produce(REQUESTS_TOPIC, key=marker.encode(), value=value)
    assert producer.flush(30) == 0

    def ours(records: list[ConsumerRecord]) -> dict[tuple[int, int], DeadLetter]:
        # at-least-once: a redelivered input is dead-lettered again; one per source offset
        letters = (DeadLetter.from_json(r.value) for r in records if marker.encode() in r.value)
        return {(letter.partition, letter.offset): letter for letter in letters}

    letters = list(ours(dlq.read_until(lambda rs: len(ours(rs)) >= len(bad_inputs))).values())
    reasons = collections.Counter(letter.reason for letter in letters)
    assert reasons == {"not_json": 1, "not_utf8": 1, "invalid": 2, "limit_exceeded": 1}
    for letter in letters:
        assert letter.source_topic == REQUESTS_TOPIC and letter.key == marker
        assert letter.error
    assert any("source_lang" in letter.error for letter in letters)

    wanted = {good["request_id"], unsupported["request_id"]}
    by_id = results_by_id(
        [r for r in results.read_until(lambda rs: wanted <= set(results_by_id(rs)))]
    )
    assert by_id[good["request_id"]][0].translation == "Ĝööð ɱöŕñîñĝ"
    error = by_id[unsupported["request_id"]][0]
    assert error.status == "error" and "en_de" in (error.error or "")
    # messages in = routed + dead-lettered + error results
    assert len(letters) + len(wanted) == len(bad_inputs) + 2


def test_expired_requests_time_out_without_engine(
    settings: Settings, worker: WorkerProcess
) -> None:
    before = worker.stats()["engine_texts"]
    stale = now_ms() - 60_000
    marker = uuid.uuid4().hex
    requests = [
        TranslationRequest(
            request_id=f"{marker}-{i}",
            source_lang="en",
            target_lang="en-XA",
            text=f"never translated {marker} {i}",
            submitted_at=stale,
            timeout_ms=1000,
        )
        for i in range(20)
    ]
    with TranslationClient(settings.kafka) as client:
        replies = client.translate(requests, timeout_s=60)
    assert not replies.missing
    assert {r.status for r in replies.results.values()} == {"timeout"}
    assert worker.stats()["engine_texts"] == before


def test_thousand_requests_with_repeats_and_redis_outage(
    settings: Settings, worker: WorkerProcess, stack: object
) -> None:
    rng = random.Random(7)
    marker = uuid.uuid4().hex[:8]
    distinct = [f"Sentence {marker} number {i} for the test" for i in range(700)]
    texts = distinct + [rng.choice(distinct) for _ in range(300)]
    rng.shuffle(texts)
    requests = build_requests(texts, EN_XA)
    results = TopicTail(settings.kafka.bootstrap_servers, RESULTS_TOPIC)
    with TranslationClient(settings.kafka) as client:
        client.submit(requests[:500])
        manager.down(settings, names=["redis"])
        try:
            client.submit(requests[500:])
            wanted = {r.request_id for r in requests}
            records = results.read_until(lambda rs: wanted <= set(results_by_id(rs)), 300)
        finally:
            manager.up(settings)
    by_id = results_by_id(records)
    mine = {rid: rs for rid, rs in by_id.items() if rid in wanted}
    assert set(mine) == wanted
    firsts = {rid: rs[0] for rid, rs in mine.items()}
    assert all(r.status == "ok" for r in firsts.values()), "Redis outage must fail no request"
    text_of = {r.request_id: r.text for r in requests}
    misses = collections.Counter(text_of[rid] for rid, r in firsts.items() if r.cache == "miss")
    # The engine sees each distinct text once per window; every repeat is a cache answer.
    assert set(misses) == set(distinct)
    assert max(misses.values()) == 1
    assert sum(r.cache != "miss" for r in firsts.values()) == 300


def test_the_worker_listens_on_loopback_only(worker: WorkerProcess) -> None:
    """Its web server (readiness, stats) and metrics endpoint: 127.0.0.1 unless configured."""
    import psutil

    assert worker.pid is not None
    listening = {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process(worker.pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    assert len(listening) >= 2, listening  # the web server and the metrics endpoint
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening


def test_a_worker_logs_its_stacks_on_sigusr1_and_keeps_serving(
    settings: Settings, worker: WorkerProcess
) -> None:
    """What a bench or test gets in the log of a worker that never answered its probe."""
    logged_before = WORKER_LOG.stat().st_size
    worker.dump_stacks()
    with WORKER_LOG.open("rb") as log:
        log.seek(logged_before)
        dump = log.read().decode(errors="replace")
    assert "THREAD MainThread" in dump, dump[-2000:]
    assert "TASKS" in dump, "the event loop's tasks too"
    with TranslationClient(settings.kafka) as client:
        (result,) = client.translate(build_requests(["still here"], EN_XA), timeout_s=60).ordered
    assert result is not None and result.status == "ok"
