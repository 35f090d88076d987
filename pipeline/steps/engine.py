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

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.cache import CachedTranslation
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import AlignedTranslation, Translation, Translator
from pipeline.pairs import Pair
from pipeline.scheduling import INTERACTIVE, PriorityGate
from pipeline.steps.base import Batch, BatchStats, TransientError

log = logging.getLogger(__name__)

# A text every model translates; used to tell a broken engine from a poison input.
CANARY_TEXT = "Hello."
# Out-of-memory reports of CTranslate2 (CUDA and CPU allocators) are never the input's fault.
_OOM_MARKERS = ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "bad_alloc")


@dataclass(frozen=True, slots=True)
class Rejected:
    """A text the engine failed on when translating it alone (input-caused)."""

    error: str


def is_engine_fault(exc: BaseException) -> bool:
    """Whether an engine exception says the engine, not the input, is at fault."""
    if isinstance(exc, MemoryError):
        return True
    return any(marker in str(exc) for marker in _OOM_MARKERS)


class EngineRunner:
    """Runs distinct texts through the translator in planned sub-batches, one at a time.

    The engine is shared by every agent of the worker through a
    :class:`PriorityGate` (interactive before bulk).
    """

    def __init__(
        self,
        translator: Translator,
        batcher: TokenBudgetBatcher,
        gate: PriorityGate,
        priority: int = INTERACTIVE,
    ) -> None:
        self._translator = translator
        self._batcher = batcher
        self._gate = gate
        self._priority = priority

    async def run(
        self, texts: Sequence[str], pair: Pair, stats: BatchStats
    ) -> list[Translation | Rejected]:
        """One outcome per text, in order; raises TransientError when the engine is at fault."""
        lengths = [self._translator.count_tokens(t, pair) for t in texts]
        plan = self._batcher.plan(lengths)
        stats.padding_ratio = plan.padding_ratio
        out: list[Translation | Rejected | None] = [None] * len(texts)
        for indices in plan.batches:
            stats.engine_batches.append(len(indices))
            began = time.perf_counter()
            results = await self._narrowing([texts[i] for i in indices], pair)
            stats.engine_seconds += time.perf_counter() - began
            for i, result in zip(indices, results, strict=True):
                out[i] = result
                if isinstance(result, Translation):
                    stats.engine_input_tokens += result.input_tokens
                    stats.engine_output_tokens += result.output_tokens
        stats.engine_texts += len(texts)
        outcomes = [o for o in out if o is not None]
        if any(isinstance(o, Rejected) for o in outcomes):
            await self._check_canary(pair)
        return outcomes

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
        aligned = getattr(self._translator, "translate_aligned", None)
        if aligned is None:
            raise TransientError("the translator gives no attention")
        loop = asyncio.get_running_loop()
        began = time.perf_counter()
        try:
            out: list[AlignedTranslation] = await self._gate.run(
                self._priority, loop.run_in_executor(None, aligned, list(texts), pair)
            )
        except Exception as exc:
            raise TransientError(f"engine failed with attention: {exc}") from exc
        stats.engine_seconds += time.perf_counter() - began
        stats.engine_texts += len(texts)
        return out

    async def _call(self, texts: list[str], pair: Pair) -> list[Translation]:
        return await self._gate.run(
            self._priority, self._translator.translate_batch_async(texts, pair)
        )

    async def _narrowing(self, texts: list[str], pair: Pair) -> list[Translation | Rejected]:
        try:
            return list(await self._call(texts, pair))
        except Exception as exc:
            if is_engine_fault(exc):
                raise TransientError(f"engine failed: {type(exc).__name__}: {exc}") from exc
            if len(texts) == 1:
                log.warning("translation failed for one text: %s", exc)
                return [Rejected(f"{type(exc).__name__}: {exc}")]
            mid = len(texts) // 2
            head = await self._narrowing(texts[:mid], pair)
            tail = await self._narrowing(texts[mid:], pair)
            return head + tail

    async def _check_canary(self, pair: Pair) -> None:
        try:
            await self._call([CANARY_TEXT], pair)
        except Exception as exc:
            raise TransientError(
                f"engine failed a known-good text too: {type(exc).__name__}: {exc}"
            ) from exc


class Translate:
    """Translates every unanswered item's text once.

    Reads: ``request.text`` of unanswered leaders. Sets: ``translation``
    (cache level ``miss``) or, for a text the engine rejects on its own,
    ``error`` with reason ``engine_rejected``. Raises:
    :class:`TransientError` when the engine as a whole fails.
    """

    def __init__(self, runner: EngineRunner) -> None:
        self._runner = runner

    async def __call__(self, batch: Batch) -> None:
        todo = [item for item in batch.unanswered() if item.request is not None]
        if not todo or batch.pair is None:
            return
        texts = [item.request.text for item in todo if item.request is not None]
        outcomes = await self._runner.run(texts, batch.pair, batch.stats)
        for item, outcome in zip(todo, outcomes, strict=True):
            item.engine_batch_size = len(todo)
            if isinstance(outcome, Rejected):
                item.error, item.reason = outcome.error, "engine_rejected"
            else:
                item.cache = "miss"
                item.translation = CachedTranslation(
                    outcome.text, batch.model_id, outcome.input_tokens, outcome.output_tokens
                )
