"""Consumer groups as `status` and `translate` read them, and workers' readiness pages."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from pipeline.cli.status import http_probe, readiness, worker_status
from pipeline.kafka.groups import Group, Member, _member, serving

# what kafka-python's describe_groups returns for a Faust worker (metadata shortened)
FAUST_MEMBER = {
    "client_host": "/127.0.0.1",
    "client_id": "faust-0.15.3",
    "member_assignment": {
        "assigned_partitions": [
            {"partitions": [0], "topic": "babelstream-__assignor-__leader"},
            {"partitions": [0, 1, 2, 3], "topic": "babelstream-dedup-en_en-XA-changelog"},
            {"partitions": [1, 0], "topic": "translate.work.demo"},
            {"partitions": [0, 1, 2, 3], "topic": "translate.work-bulk.demo"},
            {"partitions": [0, 1, 2, 3, 4, 5], "topic": "translate.requests"},
        ]
    },
    "member_metadata": "\x00\x04\x00\x00\x00\x08\x00\x13translate.work.demo\x00\x00\x00"
    '\x98{"assignment":{"actives":{},"standbys":{}},'
    '"url":"http://127.0.0.1:6066","changelog_distribution":{}}',
}


def test_a_faust_member_with_its_url_and_project_partitions() -> None:
    member = _member(FAUST_MEMBER)
    assert member == Member(
        "faust-0.15.3",
        "127.0.0.1",
        {
            "translate.work-bulk.demo": [0, 1, 2, 3],
            "translate.requests": [0, 1, 2, 3, 4, 5],
            "translate.work.demo": [0, 1],
        },
        "http://127.0.0.1:6066",
    )


def test_a_plain_consumer_has_no_url() -> None:
    raw = {**FAUST_MEMBER, "member_metadata": b"\x00\x01garbage"}
    assert _member(raw).url is None
    # kafka-python decodes a plain kafka-python consumer's subscription into a dict
    decoded = {**FAUST_MEMBER, "member_metadata": {"topics": ["x"], "user_data": ""}}
    assert _member(decoded).url is None


def test_models_and_serving() -> None:
    worker = Group("babelstream", "Stable", [_member(FAUST_MEMBER)])
    naive = Group("bench-naive", "Stable", [Member("c", "h", {"bench.naive": [0]})])
    assert worker.models == ["demo"]
    assert serving([worker, naive], "translate.work.demo") == [worker]
    assert serving([worker, naive], "translate.work.other") == []


class _Ready(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, object]]] = {}

    def do_GET(self) -> None:
        status, body = self.answers.get(self.path, (404, "not found"))
        data = json.dumps(body).encode()
        self.send_response(status)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_readiness_in_words(web: str) -> None:
    _Ready.answers = {
        "/ready": (200, {"ready": True, "pairs": ["en_en-XA"]}),
        "/starting": (503, {"ready": False, "reason": "recovering tables"}),
    }
    assert readiness(http_probe(f"{web}/ready", 1.0)) == "ready"
    assert readiness(http_probe(f"{web}/starting", 1.0)) == "not ready: recovering tables"
    assert readiness(http_probe(f"{web}/old", 1.0)) == "no readiness page (HTTP 404)"
    gone = readiness(http_probe("http://127.0.0.1:9/ready", 1.0))
    assert gone.startswith("web port not answering")


def test_worker_status_line(web: str) -> None:
    _Ready.answers = {"/babelstream/ready": (200, {"ready": True})}
    member = Member("faust", "127.0.0.1", {"translate.work.demo": [0, 1, 2, 5]}, web)
    plain = Member("kafka-python", "10.0.0.2", {"translate.requests": [0]})
    group = Group("babelstream", "Stable", [member, plain], {"translate.work.demo": 7})
    status = worker_status(group, 1.0)
    summary, *members = status.detail.splitlines()
    assert summary == ("group babelstream (Stable): members 2, ready 1, models demo, lag 7")
    assert members[0].strip() == (f"member faust at {web}: ready; translate.work.demo 0-2,5")
    assert "not a Faust worker" in members[1]
    assert status.info["total_lag"] == 7 and status.running
