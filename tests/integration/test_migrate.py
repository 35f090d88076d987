"""Upgrading from per-pair work topics: what waits there reaches the models' topics, once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from pipeline.cli.main import main
from pipeline.client import build_requests, reliable_producer
from pipeline.contract.pairs import legacy_pair_topics
from pipeline.drill.reconcile import ResultTally
from pipeline.kafka.clients import kafka_python_options
from pipeline.kafka.topics import TopicSpec, ensure_topics
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_PAIR, WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log_path = PROJECT_ROOT / "var" / "log" / "test-migrate-worker.log"
    with WorkerProcess(settings, log_path=log_path) as w:
        yield w


def test_records_left_in_per_pair_topics_are_translated_after_migrate(
    settings: Settings, worker: WorkerProcess
) -> None:
    interactive, bulk = legacy_pair_topics(DEMO_PAIR)
    ensure_topics(settings.kafka, {interactive: TopicSpec(2), bulk: TopicSpec(2)})
    marker = f"migrate-{uuid.uuid4().hex[:8]}"
    requests = build_requests([f"Left behind {marker} {i}." for i in range(5)], DEMO_PAIR)
    # a group of its own, committed to the old topics' ends now: only these records wait
    group = f"test-{marker}"
    _commit_ends(settings, group, [interactive, bulk])
    with ResultTally(settings.kafka, marker="") as tally:
        producer = reliable_producer(settings.kafka, "test-migrate")
        for request in requests:
            producer.send(interactive, key=request.pair.id.encode(), value=request.to_json())
        producer.flush()
        producer.close()
        dry = CliRunner().invoke(main, ["topics", "migrate", "--group", group, "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert f"{interactive}: " in dry.output and "would copy" in dry.output
        done = CliRunner().invoke(main, ["topics", "migrate", "--group", group, "--json"])
        assert done.exit_code == 0, done.output
        report = {t["topic"]: t for t in json.loads(done.output)["topics"]}
        assert (report[interactive]["copied"], report[bulk]["copied"]) == (len(requests), 0)
        assert report[interactive]["target"] == "translate.work.babelstream-demo-enxa"
        ids = [r.request_id for r in requests]
        assert tally.wait_for(ids, 60), "the migrated requests were translated"
        results = tally.snapshot()
    assert {results[i][0].status for i in ids} == {"ok"}
    again = CliRunner().invoke(main, ["topics", "migrate", "--group", group, "--json"])
    assert json.loads(again.output)["copied"] == 0, "nothing is copied twice"
    # the running worker's group could not commit past what a migration copied
    busy = CliRunner().invoke(main, ["topics", "migrate", "--group", "babelstream"])
    assert busy.exit_code != 0 and "member(s) running; stop its workers" in busy.output
    assert "Traceback" not in busy.output


def _commit_ends(settings: Settings, group: str, topics: list[str]) -> None:
    consumer = KafkaConsumer(
        **kafka_python_options(settings.kafka, "test-migrate"),
        group_id=group,
        enable_auto_commit=False,
    )
    try:
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        consumer.commit({tp: OffsetAndMetadata(end, "", -1) for tp, end in ends.items()})
    finally:
        consumer.close(autocommit=False)
