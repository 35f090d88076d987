"""Batch-level cases of the translation hot path, run against two backends.

One contract suite: ``tests/unit/steps/test_hotpath.py`` runs every case with an
in-memory producer and Redis fake, ``tests/integration/test_hotpath_kafka.py``
with a real Kafka producer and the real Redis of the local stack. The steps
and the runner are the worker's own (``pipeline/steps/chains.py``); only
Faust is left out (its table is replaced by an in-memory window).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.contract.digest import request_digest
from pipeline.contract.messages import DeadLetter, TranslationRequest, TranslationResult, now_ms
from pipeline.contract.pairs import QUARANTINE_TOPIC, RESULTS_TOPIC, Pair, work_topic
from pipeline.control.cancels import CancelRegistry, cancels_for
from pipeline.control.priority import INTERACTIVE, PriorityGate
from pipeline.control.quarantine import QuarantineRegistry, apply_record
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import Translation
from pipeline.kafka.records import Outgoing, Record
from pipeline.kafka.reply_topics import ReplyTopicCheck
from pipeline.settings import LimitSettings, WorkerSettings
from pipeline.steps.base import Batch, Item, RetryBudgetExhausted
from pipeline.steps.batch_runner import BatchRunner, RetryHook, RetryPolicy
from pipeline.steps.chains import translation_steps
from pipeline.steps.isolation import canary_record
from pipeline.steps.publish import Producer
from pipeline.steps.quota import Quotas
from pipeline.steps.replies import ReplyCopies
from pipeline.steps.translate import EngineRunner
from pipeline.storage.cache import CachedTranslation, LruCache, RedisCache, TwoLevelCache
from workers.stats import WorkerStats

PAIR = Pair("en", "en-XA")
MODEL = "fake-model@1"
MODEL_TOPIC = "fake-model"


class FakeTranslator:
    """Upper-cases text; fails on texts containing ``poison``; scripted engine faults.

    Its tokenizer fails on texts containing ``unreadable`` (a fault no step
    classifies), and on every text once one containing ``breaker`` was counted
    (a request that breaks the steps for those after it), until ``broken`` is
    reset; ``tokenizer_faults`` fail the next counts whatever their text.
    """

    model_id = MODEL

    def __init__(self, faults: Sequence[Exception] = ()) -> None:
        self.calls: list[list[str]] = []
        self._faults = list(faults)
        self.broken = False
        self.tokenizer_faults = 0

    def count_tokens(self, text: str, pair: Pair) -> int:
        if self.tokenizer_faults:
            self.tokenizer_faults -= 1
            raise OSError("the tokenizer's file is being replaced")
        if "breaker" in text:
            self.broken = True
        if "unreadable" in text or self.broken:
            raise UnicodeError(f"the tokenizer cannot read {text!r}")
        return len(text.split())

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        self.calls.append(list(texts))
        if self._faults:
            raise self._faults.pop(0)
        if any("poison" in t for t in texts):
            raise ValueError("the engine cannot take this input")
        return [Translation(t.upper(), len(t.split()), len(t.split())) for t in texts]

    async def translate_batch_async(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        return self.translate_batch(texts, pair)

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


class MemoryWindow:
    """The dedup window as a dict (the worker's is a Faust windowed table)."""

    def __init__(self) -> None:
        self.entries: dict[str, CachedTranslation] = {}

    def get(self, item: Item) -> CachedTranslation | None:
        return self.entries.get(item.digest or "")

    def put(self, item: Item, value: CachedTranslation) -> None:
        self.entries[item.digest or ""] = value


class Backend(Protocol):
    """Where published records go, what backs the L2 cache and the quota counters, and
    which reply topics exist (``reply_topic`` does)."""

    producer: Producer
    l2: RedisCache
    reply_topic: str

    def quotas(self, chars: dict[str, int]) -> Quotas:
        """Quota counters with these tenants' quotas."""
        ...

    async def list_topics(self) -> set[str]: ...

    async def published(self, marker: str, expected: int) -> list[Outgoing]:
        """The records carrying ``marker`` (at least ``expected`` of them, or all there
        are after a wait), in the order they were sent."""
        ...

    def write_raw(self, key: str, value: bytes) -> None:
        """Store raw bytes in the L2 store, bypassing the cache (to corrupt an entry)."""
        ...


@dataclass
class Harness:
    """One agent's runner over a backend, with the fakes it uses."""

    backend: Backend
    translator: FakeTranslator = field(default_factory=FakeTranslator)
    window: MemoryWindow = field(default_factory=MemoryWindow)
    marker: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    budget_s: float = 30.0
    # characters per window for this harness's tenant (None: no quota)
    quota_chars: int | None = None

    def __post_init__(self) -> None:
        self.cache = TwoLevelCache(LruCache(1000), self.backend.l2)
        self.stats = WorkerStats()
        self.cancels = CancelRegistry(horizon_ms=3_600_000, max_entries=1000)
        self.cancels.ready = True
        self.quarantine = QuarantineRegistry()
        self.quarantine.ready = True
        quotas = {} if self.quota_chars is None else {self.marker: self.quota_chars}
        engine = EngineRunner(
            self.translator,
            TokenBudgetBatcher(64),
            PriorityGate(),
            INTERACTIVE,
            canary_text=WorkerSettings().canary_for,
        )
        producer = self.backend.producer
        limits = LimitSettings()
        steps = translation_steps(
            model=MODEL_TOPIC,
            serves=lambda pair: pair == PAIR,
            limits=limits,
            window=self.window,
            cache=self.cache,
            engine=engine,
            producer=producer,
            totals=self.stats,
            compute_type="int8",
            cancels=self.cancels,
            quarantine=self.quarantine,
            control_wait_s=1.0,
            quotas=self.backend.quotas(quotas),
            replies=ReplyCopies(producer, ReplyTopicCheck(self.backend.list_topics), 5.0),
            recent_translations=WorkerSettings().recent_translations,
        )
        self.runner = BatchRunner(
            steps,
            functools.partial(Batch.of, model_id=MODEL, worker="test"),
            RetryPolicy(initial_s=0.01, max_s=0.05, budget_s=self.budget_s),
            limits=limits,
            canary=functools.partial(canary_record, self.topic, PAIR, "known good"),
            quarantine=self.quarantine,
            producer=producer,
        )

    def request(self, i: int, text: str, **fields: Any) -> TranslationRequest:
        values: dict[str, Any] = {
            "request_id": f"{self.marker}-{i}",
            "source_lang": "en",
            "target_lang": "en-XA",
            "text": text,
            "submitted_at": now_ms(),
            "timeout_ms": 60_000,
            # a tenant per harness: cache entries of earlier runs (real Redis) never answer
            "tenant": self.marker,
            **fields,
        }
        return TranslationRequest(**values)

    @property
    def topic(self) -> str:
        """Where this harness's records come from: a topic of its own, so the quarantine
        entries it writes (keyed by topic, partition and offset) name no real record."""
        return f"{work_topic(MODEL_TOPIC)}.test-{self.marker}"

    def records(self, values: Sequence[TranslationRequest | bytes]) -> list[Record]:
        out = []
        for offset, value in enumerate(values):
            if isinstance(value, TranslationRequest):
                key = request_digest(value, MODEL).encode()
                out.append(Record(self.topic, 0, offset, key, value.to_json()))
            else:
                out.append(Record(self.topic, 0, offset, self.marker.encode(), value))
        return out

    async def run(
        self, values: Sequence[TranslationRequest | bytes], on_retry: RetryHook | None = None
    ) -> Batch:
        batch = await self.runner.run(self.records(values), on_retry=on_retry)
        assert batch is not None, "the batch went through whole"
        return batch

    async def run_isolating(self, values: Sequence[TranslationRequest | bytes]) -> None:
        """Run a batch some of whose requests are set apart."""
        assert await self.runner.run(self.records(values)) is None

    async def results(self, expected: int) -> dict[str, TranslationResult]:
        """Published results by request id (exactly one each, on the shared topic)."""
        by_id: dict[str, TranslationResult] = {}
        for out in await self.backend.published(self.marker, expected):
            if out.kind == "result" and out.topic == RESULTS_TOPIC:
                result = TranslationResult.from_json(out.value)
                assert result.request_id not in by_id, "one result per request"
                by_id[result.request_id] = result
        return by_id

    async def dead_letters(self, expected: int) -> list[DeadLetter]:
        return [
            DeadLetter.from_json(o.value)
            for o in await self.backend.published(self.marker, expected)
            if o.kind == "dead_letter"
        ]


Case = Callable[[Harness], Awaitable[None]]


async def identical_texts_are_translated_once(h: Harness) -> None:
    batch = await h.run(
        [h.request(0, "good morning"), h.request(1, "good night"), h.request(2, "good morning")]
    )
    assert h.translator.texts.count("good morning") == 1
    results = await h.results(3)
    assert [results[f"{h.marker}-{i}"].translation for i in range(3)] == [
        "GOOD MORNING",
        "GOOD NIGHT",
        "GOOD MORNING",
    ]
    assert [results[f"{h.marker}-{i}"].cache for i in range(3)] == ["miss", "miss", "window"]
    assert batch.stats.by_status == {"ok": 3}


async def bad_input_is_a_dead_letter_and_the_rest_is_translated(h: Harness) -> None:
    wrong_pair = json.dumps(
        {**json.loads(h.request(2, "x").to_json()), "target_lang": "de"}
    ).encode()
    await h.run([h.request(0, "one"), b"{" + h.marker.encode(), wrong_pair, h.request(3, "two")])
    assert set(await h.results(4)) == {f"{h.marker}-0", f"{h.marker}-3"}
    letters = await h.dead_letters(4)
    assert sorted(letter.reason for letter in letters) == ["invalid", "not_json"]
    assert all(letter.value and h.marker in letter.value for letter in letters)


async def expired_requests_time_out_without_the_engine(h: Harness) -> None:
    await h.run([h.request(0, "too late", submitted_at=now_ms() - 120_000, timeout_ms=1000)])
    (result,) = (await h.results(1)).values()
    assert result.status == "timeout"
    assert h.translator.calls == []


async def a_poison_input_fails_alone(h: Harness) -> None:
    await h.run([h.request(0, "fine"), h.request(1, "poison pill"), h.request(2, "also fine")])
    results = await h.results(3)
    assert results[f"{h.marker}-1"].status == "error"
    assert results[f"{h.marker}-1"].reason == "engine_rejected"
    assert {results[f"{h.marker}-{i}"].status for i in (0, 2)} == {"ok"}


async def an_engine_fault_is_retried_not_published(h: Harness) -> None:
    h.translator = FakeTranslator([RuntimeError("CUDA failed: out of memory")] * 2)
    h.__post_init__()
    batch = await h.run([h.request(0, "hello"), h.request(1, "world")])
    results = await h.results(2)
    assert {r.status for r in results.values()} == {"ok"}, "transient faults are no results"
    assert batch.stats.attempts == 3


async def a_broken_engine_gives_up_without_results(h: Harness) -> None:
    """Every text fails, and so does the canary: the engine is at fault, not the input."""
    h.translator = FakeTranslator([ValueError("engine broken")] * 10_000)
    h.budget_s = 0.3
    h.__post_init__()
    try:
        await h.run([h.request(0, "hello"), h.request(1, "world")])
    except RetryBudgetExhausted:
        pass
    else:
        raise AssertionError("a broken engine must exhaust the retry budget")
    assert await h.backend.published(h.marker, 0) == []


async def a_corrupt_cache_entry_is_a_miss(h: Harness) -> None:
    request = h.request(0, "cached once")
    digest = request_digest(request, MODEL)
    h.backend.write_raw(h.backend.l2.key(digest), b"\xff not json")
    await h.run([request])
    (result,) = (await h.results(1)).values()
    assert (result.status, result.cache, result.translation) == ("ok", "miss", "CACHED ONCE")
    assert h.backend.l2.corrupt == 1


async def the_second_level_cache_answers(h: Harness) -> None:
    request = h.request(0, "remembered elsewhere")
    h.backend.l2.put_many(
        {request_digest(request, MODEL): CachedTranslation("FROM L2", MODEL, 2, 2)}
    )
    await h.run([request])
    (result,) = (await h.results(1)).values()
    assert (result.cache, result.translation) == ("l2", "FROM L2")
    assert h.translator.calls == []


async def cancelled_requests_are_not_translated(h: Harness) -> None:
    bulk = {"job_id": f"job-{h.marker}", "doc_id": "d", "segment_index": 0}
    requests = [
        h.request(0, "keep me"),
        h.request(1, "drop me"),
        h.request(2, "drop the job", **bulk),
    ]
    # a cancel covers requests submitted up to its stamp: stamped after these were
    stamp = max(r.submitted_at for r in requests)
    for cancel in cancels_for([f"{h.marker}-1"], [f"job-{h.marker}"], at=stamp):
        h.cancels.add(cancel)
    batch = await h.run(requests)
    results = await h.results(3)
    assert [results[f"{h.marker}-{i}"].status for i in range(3)] == ["ok", "cancelled", "cancelled"]
    assert {results[f"{h.marker}-{i}"].reason for i in (1, 2)} == {"cancelled"}
    assert h.translator.texts == ["keep me"], "no compute for cancelled requests"
    assert batch.stats.by_status == {"ok": 1, "cancelled": 2}
    # submitted after the cancel: a rerun of the job is translated
    later = h.request(3, "the job again", **bulk, submitted_at=stamp + 1)
    await h.run([later.model_copy(update={"request_id": f"{h.marker}-2"})])
    assert "the job again" in h.translator.texts


async def over_quota_requests_are_rejected_with_when_to_retry(h: Harness) -> None:
    h.quota_chars = 30
    h.__post_init__()
    texts = ["twenty characters!!!", "twenty more chars!!!", "five!"]
    await h.run([h.request(i, text) for i, text in enumerate(texts)])
    results = await h.results(3)
    statuses = [results[f"{h.marker}-{i}"] for i in range(3)]
    assert [r.status for r in statuses] == ["ok", "rejected", "ok"]
    rejected = statuses[1]
    assert rejected.reason == "quota_exceeded" and rejected.retry_after_ms
    assert rejected.retry_after_ms > 0
    assert "twenty more chars!!!" not in h.translator.texts
    # the first request again (a redelivery): charged once, so still within the quota
    again = await h.run([h.request(0, texts[0])])
    assert again.stats.by_status == {"ok": 1}


async def results_are_copied_to_existing_reply_topics_only(h: Harness) -> None:
    gone = f"translate.replies.gone-{h.marker}"
    await h.run(
        [
            h.request(0, "reply here", reply_to=h.backend.reply_topic),
            h.request(1, "reply nowhere", reply_to=gone),
            h.request(2, "no reply"),
        ]
    )
    results = await h.results(3)
    assert {r.status for r in results.values()} == {"ok"}, "every result on the shared topic"
    copies = [o for o in await h.backend.published(h.marker, 4) if o.topic == h.backend.reply_topic]
    assert [TranslationResult.from_json(o.value).request_id for o in copies] == [f"{h.marker}-0"]
    assert not [o for o in await h.backend.published(h.marker, 4) if o.topic == gone]


async def a_step_that_fails_on_one_request_ends_only_that_request(h: Harness) -> None:
    """An exception no step classifies: the request stands alone, the rest goes on at once."""
    await h.run_isolating(
        [h.request(0, "fine"), h.request(1, "an unreadable text"), h.request(2, "also fine")]
    )
    results = await h.results(3)
    assert {results[f"{h.marker}-{i}"].status for i in (0, 2)} == {"ok"}
    failed = results[f"{h.marker}-1"]
    assert (failed.status, failed.reason) == ("error", "internal_error")
    assert failed.error and "UnicodeError" in failed.error
    assert "Traceback" not in failed.error, "no traceback in a result"
    (letter,) = await h.dead_letters(4)
    assert letter.reason == "internal_error" and f"{h.marker}-1" in (letter.value or "")
    assert "Traceback" in letter.error and "UnicodeError" in letter.error
    assert h.runner.health.isolated == 1 and h.runner.health.failing_since is None
    assert h.translator.texts.count("fine") == 1, "what went through is not run again"


async def a_request_that_breaks_the_steps_is_quarantined(h: Harness) -> None:
    """It breaks the steps for every request after it, the canary too: its batch is
    marked suspect and retried until the worker gives up. A replacement tries each
    suspect alone between canaries, quarantines it, and a third worker that reads it
    again ends it without running it."""
    h.budget_s = 0.3
    h.__post_init__()
    requests = [h.request(0, "fine"), h.request(1, "the breaker")]
    records = h.records(requests)
    try:
        await h.runner.run(records)
    except RetryBudgetExhausted:
        pass
    else:
        raise AssertionError("the steps stay broken in this worker: it must give up")
    marks = [o for o in await h.backend.published(h.marker, 2) if o.topic == QUARANTINE_TOPIC]
    assert [o.kind for o in marks] == ["suspect", "suspect"]
    assert not await h.results(0), "no result while the steps are broken"

    replacement = Harness(h.backend, marker=h.marker)
    for mark in marks:
        apply_record(replacement.quarantine, mark.key, mark.value)
    assert await replacement.runner.run(replacement.records(requests)) is None
    results = await replacement.results(2)
    assert results[f"{h.marker}-0"].status == "ok"
    ended = results[f"{h.marker}-1"]
    assert (ended.status, ended.reason) == ("error", "quarantined")
    entries = [o for o in await h.backend.published(h.marker, 6) if o.topic == QUARANTINE_TOPIC]
    cleared = [o.key for o in entries if o.kind == "cleared"]
    (quarantined,) = [o for o in entries if o.kind == "quarantined"]
    assert cleared == [f"{records[0].topic}:0:0".encode()]
    assert quarantined.key == f"{records[1].topic}:0:1".encode()

    third = Harness(h.backend, marker=h.marker)
    for entry in entries:
        apply_record(third.quarantine, entry.key, entry.value)
    batch = await third.runner.run([records[1]])
    assert batch is not None and batch.stats.by_status == {"error": 1}
    assert third.translator.calls == [], "a quarantined record reaches no engine"
    assert third.translator.broken is False


async def a_failing_canary_makes_the_fault_transient(h: Harness) -> None:
    """Every request and the canary fail alike: the steps are at fault, the batch retried."""
    h.translator.tokenizer_faults = 2  # the batch, then the canary
    batch = await h.run([h.request(0, "hello"), h.request(1, "world")])
    results = await h.results(2)
    assert {r.status for r in results.values()} == {"ok"}, "no error results"
    assert batch.stats.attempts >= 2
    assert h.runner.health.isolated == 0


async def a_cancel_reaches_a_request_whose_batch_is_retrying(h: Harness) -> None:
    """Published at once, while the rest of the batch waits for the engine to recover."""
    h.translator = FakeTranslator([RuntimeError("CUDA failed: out of memory")] * 3)
    h.__post_init__()
    requests = [h.request(0, "keep me"), h.request(1, "cancel me while retrying")]

    async def cancel_on_first_retry(_exc: BaseException, _sleep: float) -> None:
        for cancel in cancels_for([f"{h.marker}-1"], at=requests[1].submitted_at):
            h.cancels.add(cancel)

    await h.run(requests, on_retry=cancel_on_first_retry)
    results = await h.results(2)
    assert results[f"{h.marker}-1"].status == "cancelled"
    assert results[f"{h.marker}-0"].status == "ok"
    order = [
        TranslationResult.from_json(o.value).request_id
        for o in await h.backend.published(h.marker, 2)
        if o.kind == "result"
    ]
    assert order == [f"{h.marker}-1", f"{h.marker}-0"], "the cancel was published first"
    assert "cancel me while retrying" not in h.translator.texts[-1:]


CASES: list[Case] = [
    identical_texts_are_translated_once,
    bad_input_is_a_dead_letter_and_the_rest_is_translated,
    expired_requests_time_out_without_the_engine,
    a_poison_input_fails_alone,
    an_engine_fault_is_retried_not_published,
    a_broken_engine_gives_up_without_results,
    a_corrupt_cache_entry_is_a_miss,
    the_second_level_cache_answers,
    cancelled_requests_are_not_translated,
    over_quota_requests_are_rejected_with_when_to_retry,
    results_are_copied_to_existing_reply_topics_only,
    a_step_that_fails_on_one_request_ends_only_that_request,
    a_request_that_breaks_the_steps_is_quarantined,
    a_failing_canary_makes_the_fault_transient,
    a_cancel_reaches_a_request_whose_batch_is_retrying,
]
