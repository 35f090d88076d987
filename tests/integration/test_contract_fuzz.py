"""The contract fuzz: whatever the JSON Schema accepts, a real worker serves or refuses.

Requests, bulk segments and cancels are generated from ``schemas/`` (every
optional field, odd values), most of them aimed at the pairs the demo model
serves, and sent the ways producers send them: through the router
(``translate.requests``), straight to a pair's work topics, and to
``translate.cancel``. Then plain requests follow. The properties:

* every generated request ends as a result or a dead letter within a bound,
  and never as more than one result;
* every plain request after them comes back ``ok``;
* the worker never exits, and is ready at the end.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pipeline.client import RequestOptions, TranslationClient, build_requests, reliable_producer
from pipeline.contract.messages import CancelRequest, DeadLetter, TranslationRequest, now_ms
from pipeline.contract.pairs import (
    CANCEL_TOPIC,
    DLQ_TOPIC,
    REQUESTS_TOPIC,
    Pair,
    bulk_work_topic,
    work_topic,
)
from pipeline.drill.reconcile import ResultTally
from pipeline.settings import PROJECT_ROOT, Settings, load_settings
from pipeline.stack.local_worker import DEMO_MODEL, DEMO_PAIR, WorkerProcess
from tests.contract_fuzz import describe_failure, documents, fuzz_seed, restamp
from tests.integration.helpers import TopicTail

pytestmark = pytest.mark.integration

REQUESTS = 240
CANCELS = 24
PLAIN = 40
# every generated request is answered within this (the worker serves them as any others)
ANSWER_BOUND_S = 180.0
SERVED = (DEMO_PAIR, Pair(DEMO_PAIR.target, DEMO_PAIR.source))


@pytest.fixture(scope="module")
def settings(stack: object) -> Settings:
    return load_settings()


@pytest.fixture(scope="module")
def worker(settings: Settings) -> Iterator[WorkerProcess]:
    log_path = PROJECT_ROOT / "var" / "log" / "test-contract-fuzz-worker.log"
    with WorkerProcess(settings, log_path=log_path) as w:
        yield w


def _aimed(document: dict[str, Any], i: int, marker: str, rng: random.Random) -> dict[str, Any]:
    """A generated request with a unique id, most of them for a served pair and recent."""
    fields: dict[str, Any] = {"request_id": f"{marker}-{i}-{document['request_id']}"[:128]}
    if rng.random() < 0.75:
        pair = rng.choice(SERVED)
        fields |= {"source_lang": pair.source, "target_lang": pair.target}
    if rng.random() < 0.6:
        fields["submitted_at"] = now_ms()
    return restamp(document, **fields)


def _destination(request: dict[str, Any], rng: random.Random) -> tuple[str, bytes]:
    """Where a producer might put it: the ingress (mostly), or a pair's work topics."""
    pair = Pair(request["source_lang"], request["target_lang"])
    roll = rng.random()
    if roll < 0.6 or pair not in SERVED:
        return REQUESTS_TOPIC, pair.id.encode()
    topic = work_topic(DEMO_MODEL) if roll < 0.8 else bulk_work_topic(DEMO_MODEL)
    return topic, request["request_id"].encode()


def test_whatever_the_schema_accepts_is_served_or_refused(
    settings: Settings, worker: WorkerProcess
) -> None:
    at = fuzz_seed()
    rng = random.Random(at)
    marker = f"fuzz{uuid.uuid4().hex[:8]}"
    generated = [
        _aimed(doc, i, marker, rng)
        for i, doc in enumerate(documents("translation_request", REQUESTS, at))
    ]
    for request in generated:  # every one valid for the worker's own model too
        TranslationRequest.model_validate_json(json.dumps(request))
    # cancels of some of them (and of ids no request has), sent first
    cancels = [
        restamp(doc, request_id=rng.choice(generated)["request_id"])
        if isinstance(doc.get("request_id"), str) and rng.random() < 0.7
        else doc
        for doc in documents("cancel_request", CANCELS, at)
    ]
    letters = TopicTail(settings.kafka, DLQ_TOPIC)
    producer = reliable_producer(settings.kafka, "contract-fuzz")
    with ResultTally(settings.kafka, marker) as tally:
        try:
            for cancel in cancels:
                key = CancelRequest.model_validate_json(json.dumps(cancel)).key.encode()
                producer.send(CANCEL_TOPIC, key=key, value=json.dumps(cancel).encode())
            for request in generated:
                topic, key = _destination(request, rng)
                producer.send(topic, key=key, value=json.dumps(request).encode())
            producer.flush(30)
        finally:
            producer.close(timeout=10)
        ids = {request["request_id"] for request in generated}

        def dead_lettered() -> set[str]:
            found = set()
            for record in letters.drain(quiet_s=0.5):
                letter = DeadLetter.from_json(record.value)
                try:
                    found.add(json.loads(letter.value or "")["request_id"])
                except (ValueError, KeyError, TypeError):
                    continue
            return found & ids

        letters_seen: set[str] = set()
        deadline = time.monotonic() + ANSWER_BOUND_S
        while True:
            letters_seen |= dead_lettered()
            if not ids - tally.snapshot().keys() - letters_seen or time.monotonic() > deadline:
                break
            time.sleep(1)
        results = tally.snapshot()

    unanswered = ids - results.keys() - letters_seen
    by_id = {request["request_id"]: request for request in generated}
    assert not unanswered, describe_failure(
        at, [by_id[i] for i in sorted(unanswered)], lambda _: "no result or dead letter"
    )
    repeated = {i for i, found in results.items() if len(found) > 1}
    assert not repeated, describe_failure(
        at, [by_id[i] for i in sorted(repeated)], lambda _: "more than one result"
    )
    statuses = Counter(found[0].status for found in results.values())
    reasons = Counter(found[0].reason for found in results.values() if found[0].reason)
    print(
        f"\ncontract fuzz (seed {at}): {len(generated)} requests, {len(cancels)} cancels; "
        f"results {dict(statuses)}, reasons {dict(reasons)}, "
        f"dead letters only {len(letters_seen - results.keys())}"
    )
    internal = [i for i, found in results.items() if found[0].reason == "internal_error"]
    assert not internal, describe_failure(
        at, [by_id[i] for i in internal], lambda _: "set apart as internal_error (a bug)"
    )

    plain = build_requests(
        [f"Plain request {i} after the fuzz." for i in range(PLAIN)],
        DEMO_PAIR,
        RequestOptions(timeout_ms=120_000),
    )
    with TranslationClient(settings.kafka, settings.limits, replies=settings.replies) as client:
        replies = client.translate(plain, timeout_s=120)
    assert [r.status if r else None for r in replies.ordered] == ["ok"] * PLAIN
    assert worker.returncode is None, "the worker never exits"
    assert (worker.readiness() or {}).get("ready"), worker.readiness()
