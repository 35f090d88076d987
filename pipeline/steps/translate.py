"""engine: translate what nothing else answered, in token-budget sub-batches.

Failures are classified before anything is resolved:

* a sub-batch that fails is bisected until each failing text failed *alone*;
* a text that fails alone is the request's fault only if the engine still
  translates a known-good canary text right after; then that request alone
  gets an ``error`` result (reason ``engine_rejected``);
* an engine that fails the canary too, runs out of memory, or raises
  :class:`~pipeline.errors.EngineError` for a whole call is broken, not the
  input: :class:`TransientError`, so the runner retries the batch later.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pipeline.contract.pairs import Pair
from pipeline.control.priority import BULK, INTERACTIVE, PriorityGate
from pipeline.control.residency import ModelResidency
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.capabilities import Aligning, cost_of
from pipeline.engine.overlap import EngineLane, staged
from pipeline.engine.shaping import BatchShaper
from pipeline.engine.translator import AlignedTranslation, Translation, Translator
from pipeline.observability import metrics
from pipeline.steps.base import Batch, BatchStats, Fields, Item, TransientError
from pipeline.steps.in_flight import InFlightTexts
from pipeline.storage.cache import CachedTranslation

log = logging.getLogger(__name__)

T = TypeVar("T")

# Out-of-memory reports of CTranslate2 (CUDA and CPU allocators) are never the input's fault.
_OOM_MARKERS = ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "bad_alloc")


@dataclass(frozen=True, slots=True)
class EngineRejected:
    """A text the engine failed on when translating it alone (input-caused)."""

    error: str


def is_engine_fault(exc: BaseException) -> bool:
    """Whether an engine exception says the engine, not the input, is at fault."""
    if isinstance(exc, MemoryError):
        return True
    return any(marker in str(exc) for marker in _OOM_MARKERS)


class EngineRunner:
    """Runs distinct texts of one model's pairs through the translator in planned sub-batches.

    Texts are tokenised once and planned in the engine's prep thread, calls
    run in its compute threads (:class:`~pipeline.engine.overlap.EngineLane`,
    with read-ahead), and every call goes through the worker's shared
    :class:`PriorityGate` (interactive before bulk); a plan's calls run side
    by side on as many replicas as the gate gives their priority. Texts of
    different pairs share calls (each carries its pair's target prefix),
    length-sorted together; only texts whose pairs need calls of their own
    (the translator's ``call_key``) are planned apart. Sub-batches are cut by
    the model's measured call costs: by ``shaper``'s batcher when given
    (adaptive knobs, bulk calls bounded in time), else by ``batcher``'s budget.
    ``canary_text`` gives the known-good text of a source language (telling
    a broken engine from a poison input).
    """

    def __init__(
        self,
        translator: Translator,
        batcher: TokenBudgetBatcher,
        gate: PriorityGate,
        priority: int = INTERACTIVE,
        *,
        canary_text: Callable[[str], str],
        shaper: BatchShaper | None = None,
        label: str | None = None,
        residency: ModelResidency | None = None,
    ) -> None:
        """``label``: the model, in metrics and to ``residency`` (default: the translator's
        model id); ``residency``: under a memory budget, when a batch may go to the engine."""
        self._translator = translator
        self._lane: EngineLane[Any] = EngineLane(staged(translator), gate.replicas)
        self._batcher = batcher
        self._gate = gate
        self._priority = priority
        self._priority_label = "bulk" if priority == BULK else "interactive"
        self._canary_text = canary_text
        self._label = label or translator.model_id
        self._residency = residency
        self.shaper = shaper

    def _planner(self, pair: Pair) -> TokenBudgetBatcher:
        if self.shaper is not None:
            return self.shaper.batcher()
        b = self._batcher
        return TokenBudgetBatcher(
            b.token_budget,
            b.max_batch_size,
            cost=cost_of(self._translator, pair),
            max_call_s=b.max_call_s,
        )

    def _through(self, work: Awaitable[T]) -> Awaitable[T]:
        return self._gate.run(self._priority, work)

    async def run(
        self,
        texts: Sequence[str],
        pairs: Sequence[Pair],
        stats: BatchStats,
        on_last_call: Callable[[], None] | None = None,
    ) -> list[Translation | EngineRejected]:
        """One outcome per text (``pairs[i]``: ``texts[i]``'s pair), in order; raises
        TransientError when the engine is at fault.

        ``on_last_call`` runs when the planned calls' last one gets the engine
        (not for the calls that narrow down a failure). Under a memory budget the
        batch first waits for its model to be resident (:class:`ModelResidency`).
        """
        async with self._resident():
            return await self._run(texts, pairs, stats, on_last_call)

    @contextlib.asynccontextmanager
    async def _resident(self) -> AsyncIterator[None]:
        """While the batch's model may use the engine (at once without a budget)."""
        if self._residency is None:
            yield
            return
        end = await self._residency.admit(self._label)
        try:
            yield
        finally:
            end()

    async def _run(
        self,
        texts: Sequence[str],
        pairs: Sequence[Pair],
        stats: BatchStats,
        on_last_call: Callable[[], None] | None,
    ) -> list[Translation | EngineRejected]:
        prepared = await self._lane.prepare(texts, pairs)
        groups: dict[Hashable, list[int]] = {}
        for i, text in enumerate(prepared):
            groups.setdefault(self._lane.translator.call_key(text.pair), []).append(i)
        out: list[Translation | EngineRejected | None] = [None] * len(texts)
        for n, indices in enumerate(groups.values()):
            last = n + 1 == len(groups)
            part = [prepared[i] for i in indices]
            results = await self._run_group(part, stats, on_last_call if last else None)
            for i, result in zip(indices, results, strict=True):
                out[i] = result
        stats.engine_texts += len(texts)
        done = [o for o in out if o is not None]
        rejected = [
            p.pair for p, o in zip(prepared, done, strict=True) if isinstance(o, EngineRejected)
        ]
        if rejected:
            await self._check_canary(rejected[0])
        return done

    async def _run_group(
        self, prepared: list[Any], stats: BatchStats, on_last_call: Callable[[], None] | None
    ) -> list[Translation | EngineRejected]:
        """Texts that may share calls: planned together, run side by side."""
        plan = await self._lane.plan(prepared, self._planner(prepared[0].pair))
        stats.padded_tokens += plan.padded_tokens
        stats.pad_tokens += plan.pad_tokens
        stats.engine_estimated_s += plan.estimated_s
        outcomes = await self._lane.run_plan(
            prepared, plan, self._through, on_last_call, self._gate.share(self._priority)
        )
        out: list[Translation | EngineRejected | None] = [None] * len(prepared)
        for outcome in outcomes:
            indices = outcome.sub_batch.indices
            stats.engine_batches.append(len(indices))
            metrics.record_engine_call(
                self._label, self._priority_label, outcome.sub_batch.padding_ratio, outcome.engine_s
            )
            results: list[Translation | EngineRejected]
            if outcome.translations is not None:
                results = list(outcome.translations)
                stats.engine_seconds += outcome.engine_s
            else:
                assert outcome.error is not None
                began = time.perf_counter()
                results = await self._narrowing([prepared[i] for i in indices], outcome.error)
                stats.engine_seconds += time.perf_counter() - began
            for i, result in zip(indices, results, strict=True):
                out[i] = result
                if isinstance(result, Translation):
                    stats.engine_input_tokens += result.input_tokens
                    stats.engine_output_tokens += result.output_tokens
        return [o for o in out if o is not None]

    @property
    def translator(self) -> Translator:
        """The translator this runner calls."""
        return self._translator

    async def run_aligned(
        self, texts: Sequence[str], pair: Pair, stats: BatchStats
    ) -> list[AlignedTranslation]:
        """Translations with attention (the fidelity layer's re-insertion), through the gate.

        Only translators with ``translate_aligned`` (CTranslate2) are asked;
        a failure here is the engine's: these texts were translated plainly
        one round before.
        """
        if not isinstance(self._translator, Aligning):
            raise TransientError("the translator gives no attention")
        aligned = self._translator.translate_aligned
        texts = list(texts)
        began = time.perf_counter()
        try:
            async with self._resident():
                out: list[AlignedTranslation] = await self._through(
                    self._lane.call(lambda: aligned(texts, pair))
                )
        except Exception as exc:
            raise TransientError(f"engine failed with attention: {exc}") from exc
        stats.engine_seconds += time.perf_counter() - began
        stats.engine_texts += len(texts)
        return out

    async def _narrowing(
        self, prepared: list[Any], failure: Exception | None = None
    ) -> list[Translation | EngineRejected]:
        """Bisect a failing call (``failure``: its error, already raised) down to the texts."""
        exc = failure
        if exc is None:
            try:
                return list(await self._lane.translate(prepared, self._through))
            except Exception as raised:
                exc = raised
        if is_engine_fault(exc):
            raise TransientError(f"engine failed: {type(exc).__name__}: {exc}") from exc
        if len(prepared) == 1:
            log.warning("translation failed for one text: %s", exc)
            return [EngineRejected(f"{type(exc).__name__}: {exc}")]
        mid = len(prepared) // 2
        head = await self._narrowing(prepared[:mid])
        tail = await self._narrowing(prepared[mid:])
        return head + tail

    def observe(self, batch: Batch, lengths: Sequence[int]) -> None:
        """Tell the shaper (adaptive batching) how this micro-batch went."""
        if self.shaper is None:
            return
        self.shaper.observe(
            submitted_ms=[i.request.submitted_at for i in batch.items if i.request is not None],
            started_ms=batch.started_at,
            taken=batch.stats.size,
            service_s=batch.stats.engine_seconds,
            lengths=lengths,
            estimated_s=batch.stats.engine_estimated_s,
        )

    async def _check_canary(self, pair: Pair) -> None:
        try:
            canary = await self._lane.prepare([self._canary_text(pair.source)], [pair])
            await self._lane.translate(canary, self._through)
        except Exception as exc:
            raise TransientError(
                f"engine failed a known-good text too: {type(exc).__name__}: {exc}"
            ) from exc


class Translate:
    """Translates every unanswered item's text once.

    Reads: ``request.text`` and ``digest`` of unanswered leaders. Sets:
    ``translation`` (cache level ``miss``, or ``window`` when an earlier batch
    in flight was translating the same text: :class:`InFlightTexts`) or, for a
    text the engine rejects on its own, ``error`` with reason
    ``engine_rejected``. Raises: :class:`TransientError` when the engine as a
    whole fails.
    """

    reads: ClassVar[Fields] = frozenset({"request", "digest", "leader"})
    sets: ClassVar[Fields] = frozenset({"translation", "error"})

    def __init__(self, runner: EngineRunner, recent: int) -> None:
        """``recent``: settled translations kept for later batches (:class:`InFlightTexts`)."""
        self._runner = runner
        self._in_flight = InFlightTexts(recent)

    async def __call__(self, batch: Batch) -> None:
        todo = [item for item in batch.unanswered() if item.request is not None]
        await self._in_flight.translate(todo, functools.partial(self._translate, batch))

    async def _translate(self, batch: Batch, todo: list[Item]) -> None:
        requests = [item.request for item in todo if item.request is not None]
        outcomes = (
            await self._runner.run(
                [r.text for r in requests],
                [r.pair for r in requests],
                batch.stats,
                batch.cues.last_call_started,
            )
            if todo
            else []
        )
        self._runner.observe(
            batch, [o.input_tokens for o in outcomes if isinstance(o, Translation)]
        )
        for item, outcome in zip(todo, outcomes, strict=True):
            item.engine_batch_size = len(todo)
            if isinstance(outcome, EngineRejected):
                item.error, item.reason = outcome.error, "engine_rejected"
            else:
                item.cache = "miss"
                item.translation = CachedTranslation(
                    outcome.text, batch.model_id, outcome.input_tokens, outcome.output_tokens
                )
