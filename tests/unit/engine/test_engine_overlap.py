"""EngineLane: work off the loop, in order, prep overlapping the model, calls side by side."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from pipeline.contract.pairs import Pair
from pipeline.control.priority import BULK, INTERACTIVE, PriorityGate
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.costs import CostModel
from pipeline.engine.overlap import EngineLane, staged
from pipeline.engine.segment import Piece
from pipeline.engine.translator import PreparedText, Translation
from pipeline.errors import EngineError
from pipeline.settings import WorkerSettings
from pipeline.steps.base import BatchStats
from pipeline.steps.translate import EngineRunner

PAIR = Pair("en", "en-XA")


class FakeTranslator:
    """Upper-cases words; records which thread did what and in which order."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.fail_on = fail_on
        self.lock = threading.Lock()
        self.model_running = threading.Event()

    def _log(self, what: str) -> None:
        with self.lock:
            self.events.append((what, threading.current_thread().name))

    def prepare(self, texts: Sequence[str], pairs: Sequence[Pair]) -> list[PreparedText]:
        self._log("prepare")
        return [
            PreparedText((Piece("", t, ""),), (tuple(t.split()),), p)
            for t, p in zip(texts, pairs, strict=True)
        ]

    def call_key(self, pair: Pair) -> str:
        return "one model"

    def encode(self, prepared: Sequence[PreparedText]) -> list[list[str]]:
        self._log(f"encode {prepared[0].sources[0][0]}")
        return [list(s) for p in prepared for s in p.sources]

    def run(self, sources: list[list[str]]) -> list[list[str]]:
        self._log(f"run {sources[0][0]}")
        if self.fail_on and any(self.fail_on in s for s in sources):
            raise EngineError("poison")
        return [[w.upper() for w in s] for s in sources]

    def assemble(
        self, prepared: Sequence[PreparedText], outputs: Sequence[list[str]]
    ) -> list[Translation]:
        self._log(f"assemble {outputs[0][0].lower()}")
        return [
            Translation(" ".join(o), p.tokens, len(o))
            for p, o in zip(prepared, outputs, strict=True)
        ]


# one long text among short ones: with cheap calls the plan cuts it off
TEXTS = ["a b", "c d", "e f g h i j k l m n o p q r s t", "u v"]
CHEAP_CALLS = TokenBudgetBatcher(1000, cost=CostModel(0.001, 0.0, 0.001))


def _run(lane: EngineLane, texts: list[str], **kwargs):
    async def go():
        loop_thread = threading.current_thread().name
        prepared = await lane.prepare(texts, [PAIR] * len(texts))
        plan = await lane.plan(prepared, CHEAP_CALLS)
        return loop_thread, plan, await lane.run_plan(prepared, plan, **kwargs)

    return asyncio.run(go())


def test_results_in_plan_order_and_nothing_on_the_loop():
    fake = FakeTranslator()
    lane = EngineLane(fake)
    loop_thread, plan, outcomes = _run(lane, TEXTS)
    assert len(plan.batches) == 2
    assert [o.sub_batch for o in outcomes] == list(plan.sub_batches)
    by_index = {
        i: t.text
        for o in outcomes
        for i, t in zip(o.sub_batch.indices, o.translations, strict=True)
    }
    assert [by_index[i] for i in range(len(TEXTS))] == [t.upper() for t in TEXTS]
    threads = {what.split()[0]: name for what, name in fake.events}
    assert threads["prepare"].startswith("engine-prep")
    assert threads["encode"].startswith("engine-prep")
    assert threads["assemble"].startswith("engine-prep")
    assert threads["run"].startswith("engine-compute")
    assert loop_thread not in {name for _, name in fake.events}
    assert all(o.engine_s >= 0 for o in outcomes)
    lane.close()


def test_next_sub_batch_is_encoded_before_the_model_finishes():
    fake = FakeTranslator()
    release = threading.Event()
    original_run = fake.run

    def slow_run(sources):
        # the first call waits until the second sub-batch has been encoded
        if not release.is_set():
            assert release.wait(5), "read-ahead did not encode the next sub-batch"
        return original_run(sources)

    original_encode = fake.encode

    def encode(prepared):
        out = original_encode(prepared)
        if sum(1 for what, _ in fake.events if what.startswith("encode")) == 2:
            release.set()
        return out

    fake.run, fake.encode = slow_run, encode  # type: ignore[method-assign]
    _, _, outcomes = _run(EngineLane(fake), TEXTS)
    # without read-ahead the first call would have failed waiting for the second encode
    assert all(o.error is None for o in outcomes)


def test_a_failing_call_keeps_the_others():
    fake = FakeTranslator(fail_on="e")
    _, _, outcomes = _run(EngineLane(fake), TEXTS)
    failed = [o for o in outcomes if o.error is not None]
    assert len(failed) == 1 and isinstance(failed[0].error, EngineError)
    assert failed[0].translations is None
    assert 2 in failed[0].sub_batch.indices
    assert sum(len(o.translations or []) for o in outcomes) == 3


def _recording_gate(gated: list[str]):
    """A gate that lets every call through at once and logs its way in and out."""

    async def through(work):
        gated.append("in")
        try:
            return await work
        finally:
            gated.append("out")

    return through


def test_every_model_call_goes_through_the_gate():
    gated: list[str] = []
    _run(EngineLane(FakeTranslator()), TEXTS, through=_recording_gate(gated))
    assert gated == ["in", "out", "in", "out"]


def test_the_last_call_is_announced_once_it_gets_the_engine():
    fake = FakeTranslator()
    gated: list[str] = []

    def announced() -> None:
        gated.append("last call")
        with fake.lock:
            gated.append(f"{sum(1 for what, _ in fake.events if what.startswith('run'))} runs")

    _run(EngineLane(fake), TEXTS, through=_recording_gate(gated), on_last_call=announced)
    # past the gate, before the model computes: the first call is over, the last not begun
    assert gated == ["in", "out", "in", "last call", "1 runs", "out"]


def test_translators_with_translate_batch_only_run_whole_texts():
    class Plain:
        model_id = "plain"

        def count_tokens(self, text: str, pair: Pair) -> int:
            return len(text.split())

        def translate_batch(self, texts, pair):
            return [Translation(t[::-1], 1, 1) for t in texts]

    lane = EngineLane(staged(Plain()))
    _, plan, outcomes = _run(lane, TEXTS)
    assert plan.real_tokens == sum(len(t.split()) for t in TEXTS)
    by_index = {
        i: t.text
        for o in outcomes
        for i, t in zip(o.sub_batch.indices, o.translations, strict=True)
    }
    assert [by_index[i] for i in range(len(TEXTS))] == [t[::-1] for t in TEXTS]
    fake = FakeTranslator()
    assert staged(fake) is fake  # the four stages of its own


def test_translate_one_call_raises_the_engine_error():
    async def go():
        lane = EngineLane(FakeTranslator(fail_on="x"))
        ok = await lane.translate(await lane.prepare(["p q"], [PAIR]))
        assert [t.text for t in ok] == ["P Q"]
        with pytest.raises(EngineError):
            await lane.translate(await lane.prepare(["x y"], [PAIR]))

    asyncio.run(go())


class _Meeting(FakeTranslator):
    """Each model call waits, in its compute thread, until ``expected`` calls are running."""

    def __init__(self, expected: int, timeout_s: float = 5.0) -> None:
        super().__init__()
        self.meeting = threading.Barrier(expected, timeout=timeout_s)

    def run(self, sources: list[list[str]]) -> list[list[str]]:
        self.meeting.wait()  # broken (an error) if the calls ran one at a time
        return super().run(sources)


def test_with_width_two_two_calls_compute_at_once_and_outcomes_keep_the_plan_order():
    fake = _Meeting(expected=2)
    lane = EngineLane(fake, replicas=2)
    _, plan, outcomes = _run(lane, TEXTS, width=2)
    assert [o.error for o in outcomes] == [None, None]
    assert [o.sub_batch for o in outcomes] == list(plan.sub_batches)
    runs = {name for what, name in fake.events if what.startswith("run")}
    assert len(runs) == 2, "two compute threads, one per replica"
    lane.close()


def test_width_one_keeps_calls_one_at_a_time_even_with_two_replicas():
    # bulk's share when there are two replicas: its calls never meet
    lane = EngineLane(_Meeting(expected=2, timeout_s=0.3), replicas=2)
    _, _, outcomes = _run(lane, TEXTS, width=1)
    assert all(isinstance(o.error, threading.BrokenBarrierError) for o in outcomes)
    lane.close()


class _Overlaps(FakeTranslator):
    """Counts the model calls running at once; each takes 0.2 s."""

    def __init__(self) -> None:
        super().__init__()
        self.running = self.peak = 0

    def cost_model(self, pair: Pair) -> CostModel:
        return CHEAP_CALLS.cost

    def run(self, sources: list[list[str]]) -> list[list[str]]:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.2)
        with self.lock:
            self.running -= 1
        return super().run(sources)


@pytest.mark.parametrize(("priority", "at_once"), [(INTERACTIVE, 2), (BULK, 1)])
def test_a_runner_runs_as_many_calls_at_once_as_the_gate_gives_its_priority(priority, at_once):
    fake = _Overlaps()
    runner = EngineRunner(
        fake,  # type: ignore[arg-type]
        CHEAP_CALLS,
        PriorityGate(2),
        priority,
        canary_text=WorkerSettings().canary_for,
        label="fake",
    )
    stats = BatchStats()
    out = asyncio.run(runner.run(TEXTS, [PAIR] * len(TEXTS), stats))
    assert [t.text for t in out] == [t.upper() for t in TEXTS]
    assert len(stats.engine_batches) == 2
    assert fake.peak == at_once
