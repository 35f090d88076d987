"""The engine off the event loop, with one sub-batch's model call overlapping the next.

:class:`EngineLane` owns two single-thread executors for one translator:

* ``prep`` — tokenisation and length counting (:meth:`EngineLane.prepare`),
  building a call's source token lists and detokenising its output;
* ``compute`` — the model call itself (CTranslate2 releases the GIL), one at a
  time, so the engine is never oversubscribed by its own callers.

Neither is the loop's default executor, which Redis calls use (through their
own executor, :class:`pipeline.cache.TwoLevelCache`) and anything else may.

:meth:`EngineLane.run_plan` runs a :class:`~pipeline.engine.batching.BatchPlan`
as a three-stage pipeline (read-ahead, as CTranslate2's own
``translate_iterable`` does): while the model computes sub-batch *k*, the
prep thread builds the sources of *k + 1* and detokenises *k − 1*. The
texts were tokenised once, by :meth:`EngineLane.prepare`, before planning.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pipeline.engine.batching import BatchPlan, SubBatch, TokenBudgetBatcher
from pipeline.engine.translator import PreparedText, Translation
from pipeline.pairs import Pair

T = TypeVar("T")

Hold = Callable[[], AbstractAsyncContextManager[object]]


class PreparedTranslator(Protocol):
    """The translator side :class:`EngineLane` drives (``CTranslate2Translator`` is one)."""

    def prepare(self, texts: Sequence[str], pair: Pair) -> list[PreparedText]: ...

    def encode(self, prepared: Sequence[PreparedText]) -> list[list[str]]: ...

    def run(self, sources: list[list[str]], pair: Pair) -> list[list[str]]: ...

    def assemble(
        self, prepared: Sequence[PreparedText], outputs: Sequence[list[str]], pair: Pair
    ) -> list[Translation]: ...


@dataclass(frozen=True, slots=True)
class SubBatchOutcome:
    """One planned call: its translations (in the sub-batch's order) or the error it raised."""

    sub_batch: SubBatch
    translations: list[Translation] | None
    error: Exception | None
    engine_s: float


def _no_hold() -> AbstractAsyncContextManager[object]:
    return contextlib.nullcontext()


class EngineLane:
    """One translator's prep and compute executors, and the overlapped run of a plan."""

    def __init__(self, translator: PreparedTranslator) -> None:
        self.translator = translator
        self.prep = ThreadPoolExecutor(1, thread_name_prefix="engine-prep")
        self.compute = ThreadPoolExecutor(1, thread_name_prefix="engine-compute")

    async def _in(self, executor: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    async def prepare(self, texts: Sequence[str], pair: Pair) -> list[PreparedText]:
        """Cut and tokenise ``texts`` once, in the prep thread."""
        texts = list(texts)
        return await self._in(self.prep, lambda: self.translator.prepare(texts, pair))

    async def plan(
        self, prepared: Sequence[PreparedText], batcher: TokenBudgetBatcher
    ) -> BatchPlan:
        """Cost-optimal sub-batches of prepared texts (by source tokens), in the prep thread."""
        lengths = [p.tokens for p in prepared]
        return await self._in(self.prep, lambda: batcher.plan(lengths))

    async def translate(
        self, prepared: Sequence[PreparedText], pair: Pair, hold: Hold = _no_hold
    ) -> list[Translation]:
        """One engine call on prepared texts (no overlap); raises what the engine raises."""
        whole = SubBatch(
            tuple(range(len(prepared))),
            sum(p.tokens for p in prepared),
            max((p.tokens for p in prepared), default=0),
            0.0,
        )
        (outcome,) = await self.run_plan(prepared, BatchPlan((whole,)), pair, hold)
        if outcome.error is not None:
            raise outcome.error
        assert outcome.translations is not None
        return outcome.translations

    async def run_plan(
        self,
        prepared: Sequence[PreparedText],
        plan: BatchPlan,
        pair: Pair,
        hold: Hold = _no_hold,
    ) -> list[SubBatchOutcome]:
        """Run every sub-batch of ``plan``, overlapping calls with their neighbours' prep work.

        ``hold()`` is entered around each model call (the worker's priority
        gate). A failing call does not stop the others; its outcome carries
        the error, for the caller to narrow down.
        """
        translator = self.translator
        groups = [[prepared[i] for i in sub.indices] for sub in plan.sub_batches]
        outcomes: list[SubBatchOutcome] = []

        def encode(k: int) -> asyncio.Future[list[list[str]]]:
            return asyncio.ensure_future(self._in(self.prep, lambda: translator.encode(groups[k])))

        async def assemble(
            k: int, outputs: list[list[str]] | BaseException, engine_s: float
        ) -> SubBatchOutcome:
            sub = plan.sub_batches[k]
            if isinstance(outputs, BaseException):
                if not isinstance(outputs, Exception):
                    raise outputs
                return SubBatchOutcome(sub, None, outputs, engine_s)
            done = await self._in(self.prep, lambda: translator.assemble(groups[k], outputs, pair))
            return SubBatchOutcome(sub, done, None, engine_s)

        next_sources = encode(0) if groups else None
        previous: asyncio.Future[SubBatchOutcome] | None = None
        for k in range(len(groups)):
            assert next_sources is not None
            sources = await next_sources
            async with hold():
                call = asyncio.ensure_future(self._model(sources, pair))
                # read-ahead: the next sources and the previous output, while the model runs
                next_sources = encode(k + 1) if k + 1 < len(groups) else None
                if previous is not None:
                    outcomes.append(await previous)
                outputs: list[list[str]] | BaseException
                try:
                    outputs, engine_s = await call
                except Exception as exc:
                    outputs, engine_s = exc, 0.0
            previous = asyncio.ensure_future(assemble(k, outputs, engine_s))
        if previous is not None:
            outcomes.append(await previous)
        return outcomes

    async def _model(self, sources: list[list[str]], pair: Pair) -> tuple[list[list[str]], float]:
        """The model call in the compute thread, and its duration measured there."""

        def timed() -> tuple[list[list[str]], float]:
            began = time.perf_counter()
            outputs = self.translator.run(sources, pair) if sources else []
            return outputs, time.perf_counter() - began

        return await self._in(self.compute, timed)

    def close(self) -> None:
        """Stop both executors (after the running calls finish)."""
        self.prep.shutdown(wait=True)
        self.compute.shutdown(wait=True)
