"""Glossaries in the real Redis: the CLI, versions, announcements and a worker's copy."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from click.testing import CliRunner

from pipeline.cli.main import main
from pipeline.fidelity.glossary_store import GlossaryCache, GlossaryStore
from pipeline.settings import load_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def tenant(stack) -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["glossary", *args])
    return result.exit_code, result.output


def test_put_list_get_delete_with_versions(tenant, tmp_path):
    tsv = tmp_path / "terms.tsv"
    tsv.write_text("source\ttarget\nKafka\ntrain station\tƁahnhof\n# note\n", encoding="utf-8")
    code, out = cli("put", "--tenant", tenant, "--pair", "en_en-XA", str(tsv))
    assert code == 0, out
    assert json.loads(out)["version"] == 1 and json.loads(out)["terms"] == 2
    csv = tmp_path / "terms.csv"
    csv.write_text("Kafka,Ķafka\n", encoding="utf-8")
    code, out = cli("put", "--tenant", tenant, "--pair", "en_en-XA", "--name", "default", str(csv))
    assert code == 0 and json.loads(out)["version"] == 2
    code, out = cli("list", "--tenant", tenant)
    assert [json.loads(line)["version"] for line in out.splitlines()] == [2]
    code, out = cli("get", "--tenant", tenant, "--pair", "en_en-XA")
    assert out.splitlines() == ["# version 2", "Kafka\tĶafka"]
    code, out = cli("delete", "--tenant", tenant, "--pair", "en_en-XA")
    assert code == 0
    code, out = cli("get", "--tenant", tenant, "--pair", "en_en-XA")
    assert code != 0 and "no glossary" in out
    # a re-created glossary never reuses a version
    code, out = cli("put", "--tenant", tenant, "--pair", "en_en-XA", str(tsv))
    assert json.loads(out)["version"] == 3


def test_bad_files_give_one_line_errors(tenant, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\n", encoding="utf-8")
    code, out = cli("put", "--tenant", tenant, "--pair", "en_en-XA", str(bad))
    assert code != 0 and "expected 1 or 2 columns" in out and "Traceback" not in out


def test_changes_are_announced_and_a_worker_copy_follows_within_seconds(tenant):
    settings = load_settings()
    store = GlossaryStore(settings.redis)
    pubsub = store._client.pubsub()
    pubsub.subscribe(store.channel)
    pubsub.get_message(timeout=1)  # subscribe confirmation
    from pipeline.fidelity.glossary import Term

    store.put(tenant, "en_en-XA", "brand", [Term("Kafka")])
    message = pubsub.get_message(timeout=5)
    assert message and json.loads(message["data"]) == [tenant, "en_en-XA", "brand", 1]
    cache = GlossaryCache(store.get, refresh_s=0.5)
    first = cache.get(tenant, "en_en-XA", "brand")
    assert first is not None and first.version == 1
    store.put(tenant, "en_en-XA", "brand", [Term("Kafka", "Ķafka")])
    deadline = time.monotonic() + 30
    while (current := cache.get(tenant, "en_en-XA", "brand")) is not None and current.version < 2:
        assert time.monotonic() < deadline, "the new version was not picked up"
        time.sleep(0.1)
    assert current is not None and [m.replacement for m in current.find("Kafka")] == ["Ķafka"]
    pubsub.close()
    store.close()
