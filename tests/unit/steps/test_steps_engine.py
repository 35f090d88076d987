"""The engine step on the engine lane: measured call costs, bulk calls bounded, the shaper fed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from pipeline.bench.e2e import stats_delta
from pipeline.contract.messages import TranslationRequest, now_ms
from pipeline.contract.pairs import Pair, work_topic
from pipeline.control.priority import BULK, INTERACTIVE, PriorityGate
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.costs import CostModel
from pipeline.engine.shaping import BatchShaper
from pipeline.engine.translator import Translation
from pipeline.fidelity.prepare import FidelityConfig
from pipeline.fidelity.service import FidelityService
from pipeline.kafka.records import Record
from pipeline.settings import WorkerSettings, load_settings
from pipeline.steps.base import AgentCues, Batch, BatchStats, Item
from pipeline.steps.fidelity import TranslateFaithfully
from pipeline.steps.translate import EngineRunner, Translate
from workers.stats import WorkerStats

PAIR = Pair("en", "de")
MODEL = "fake"
CANARY = WorkerSettings().canary_for


def SERVES(pair: Pair) -> bool:
    return pair == PAIR


class CostedTranslator:
    """Echoes texts; one token per word; call costs as measured (given)."""

    model_id = "fake"

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.calls: list[list[str]] = []

    def cost_model(self, pair: Pair) -> CostModel:
        return self.cost

    def count_tokens(self, text: str, pair: Pair) -> int:
        return len(text.split())

    def translate_batch(self, texts: Sequence[str], pair: Pair) -> list[Translation]:
        self.calls.append(list(texts))
        return [Translation(t, len(t.split()), len(t.split())) for t in texts]


SHORT, LONG = "a b", " ".join(["w"] * 40)


def _run(runner: EngineRunner, texts: list[str]) -> BatchStats:
    stats = BatchStats()
    out = asyncio.run(runner.run(texts, [PAIR] * len(texts), stats))
    assert [t.text for t in out] == texts  # type: ignore[union-attr]
    return stats


def test_padding_is_counted_in_tokens_across_micro_batches():
    # One call per micro-batch (calls dear): a short text padded to a long one, then
    # two equal texts. Padding is pad tokens over padded tokens, as the engine
    # ceiling counts it, not an average of the micro-batches' ratios.
    dear_calls = CostedTranslator(CostModel(per_call_s=10.0, per_step_s=0.0, per_token_s=0.01))
    runner = EngineRunner(dear_calls, TokenBudgetBatcher(4096), PriorityGate(), canary_text=CANARY)
    mixed, even = _run(runner, [SHORT, LONG]), _run(runner, [SHORT, SHORT])
    assert (mixed.padded_tokens, mixed.pad_tokens) == (80, 38)
    assert (even.padded_tokens, even.pad_tokens) == (4, 0)
    totals = WorkerStats()
    totals.record(mixed)
    totals.record(even)
    snapshot = totals.snapshot()
    assert snapshot["padding_ratio"] == pytest.approx(38 / 84)
    assert stats_delta(WorkerStats().snapshot(), snapshot)["padding_ratio"] == round(38 / 84, 4)


def test_calls_are_cut_by_the_translators_measured_costs():
    cheap_calls = CostedTranslator(CostModel(per_call_s=0.001, per_step_s=0.0, per_token_s=0.01))
    stats = _run(
        EngineRunner(cheap_calls, TokenBudgetBatcher(4096), PriorityGate(), canary_text=CANARY),
        [SHORT, LONG, SHORT, SHORT],
    )
    assert sorted(len(c) for c in cheap_calls.calls) == [1, 3]  # the long text alone
    assert stats.engine_batches and stats.padded_tokens and stats.pad_tokens == 0
    # the plan's own estimate, which adaptive batching sets against the engine time
    assert stats.engine_estimated_s == pytest.approx((0.001 + 0.4) + (0.001 + 0.06))

    dear_calls = CostedTranslator(CostModel(per_call_s=10.0, per_step_s=0.0, per_token_s=0.01))
    _run(
        EngineRunner(dear_calls, TokenBudgetBatcher(4096), PriorityGate(), canary_text=CANARY),
        [SHORT, LONG, SHORT, SHORT],
    )
    assert [len(c) for c in dear_calls.calls] == [4]  # padding is cheaper than a call


def test_bulk_calls_stay_within_their_time_bound():
    settings = load_settings()
    settings = settings.model_copy(
        update={"batching": settings.batching.model_copy(update={"bulk_max_call_s": 0.05})}
    )
    translator = CostedTranslator(CostModel(per_call_s=0.005, per_step_s=0.0, per_token_s=0.001))
    shaper = BatchShaper(settings, "fake", SERVES, translator.cost, bulk=True)
    runner = EngineRunner(
        translator,
        TokenBudgetBatcher(4096),
        PriorityGate(),
        BULK,
        canary_text=CANARY,
        shaper=shaper,
    )
    _run(runner, [" ".join(["w"] * 10)] * 12)
    # 10 tokens each: 5 ms + 10 ms per text; 4 texts = 45 ms, a fifth would pass 50 ms
    assert [len(c) for c in translator.calls] == [4, 4, 4]


EngineStep = Callable[[Batch], Awaitable[None]]


def _plain(runner: EngineRunner) -> EngineStep:
    return Translate(runner, WorkerSettings().recent_translations)


def _faithful(runner: EngineRunner) -> EngineStep:
    return TranslateFaithfully(
        runner, FidelityService(FidelityConfig(), None), WorkerSettings().recent_translations
    )


@pytest.mark.parametrize("make_step", [_plain, _faithful], ids=["plain", "fidelity"])
def test_engine_step_feeds_the_adaptive_controller(
    make_step: Callable[[EngineRunner], EngineStep],
):
    settings = load_settings()
    settings = settings.model_copy(
        update={
            "batching": settings.batching.model_copy(
                update={"adaptive": True, "p95_ms": {PAIR.id: 500.0}}
            )
        }
    )
    translator = CostedTranslator(CostModel(per_call_s=0.005, per_step_s=0.0, per_token_s=0.001))
    shaper = BatchShaper(settings, "fake", SERVES, translator.cost, bulk=False)
    runner = EngineRunner(
        translator,
        TokenBudgetBatcher(4096),
        PriorityGate(),
        INTERACTIVE,
        canary_text=CANARY,
        shaper=shaper,
    )
    submitted = now_ms() - 2000  # waited two seconds before the batch began
    items = []
    for i, text in enumerate([SHORT, LONG]):
        request = TranslationRequest(
            request_id=f"r{i}",
            source_lang="en",
            target_lang="de",
            text=text,
            submitted_at=submitted,
        )
        record = Record(work_topic(MODEL), 0, i, b"k", request.to_json())
        items.append(Item(record, request=request, digest=f"d{i}"))
    batch = Batch(items, "fake", "test")
    asyncio.run(make_step(runner)(batch))
    assert [item.translation.text for item in items] == [SHORT, LONG]  # type: ignore[union-attr]
    assert shaper.controller is not None
    state = shaper.controller.state
    assert state.queue_delay_s > 0.1  # smoothed two-second wait
    assert state.service_s > 0


@pytest.mark.parametrize("make_step", [_plain, _faithful], ids=["plain", "fidelity"])
def test_engine_step_announces_its_last_call_before_computing_it(
    make_step: Callable[[EngineRunner], EngineStep],
):
    # a cost model that cuts the short and the long text into two calls
    translator = CostedTranslator(CostModel(per_call_s=0.0, per_step_s=0.0, per_token_s=0.001))
    runner = EngineRunner(
        translator, TokenBudgetBatcher(4096), PriorityGate(), INTERACTIVE, canary_text=CANARY
    )
    items = []
    for i, text in enumerate([SHORT, LONG]):
        request = TranslationRequest(
            request_id=f"r{i}", source_lang="en", target_lang="de", text=text, submitted_at=now_ms()
        )
        record = Record(work_topic(MODEL), 0, i, b"k", request.to_json())
        items.append(Item(record, request=request, digest=f"d{i}"))
    calls_at_announcement: list[int] = []
    batch = Batch(items, "fake", "test")
    batch.cues = AgentCues(
        last_call_started=lambda: calls_at_announcement.append(len(translator.calls))
    )
    asyncio.run(make_step(runner)(batch))
    assert len(translator.calls) == 2
    assert calls_at_announcement == [1]  # once: after the first call, before the last


def test_texts_of_every_pair_of_a_model_share_its_calls():
    """Batch by model: one planned call holds texts of three pairs, length-sorted together."""
    translator = CostedTranslator(CostModel(per_call_s=0.05, per_step_s=0.0, per_token_s=1e-5))
    runner = EngineRunner(translator, TokenBudgetBatcher(4096), PriorityGate(), canary_text=CANARY)
    pairs = [Pair("en", "de"), Pair("en", "fr"), Pair("de", "en"), Pair("en", "fr")]
    texts = ["one two", "three", "four five six", "seven"]
    stats = BatchStats()
    out = asyncio.run(runner.run(texts, pairs, stats))
    assert [t.text for t in out] == texts  # type: ignore[union-attr]
    assert stats.engine_batches == [4], "one engine call for the four texts"
    # the call asked each pair's translation of its texts (a fake translates per pair)
    assert sorted(map(tuple, translator.calls)) == [
        ("four five six",),
        ("one two",),
        ("three", "seven"),
    ]
