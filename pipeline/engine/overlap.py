"""The engine off the event loop, with one sub-batch's model call overlapping the next.

:class:`EngineLane` owns two single-thread executors for one translator:

* ``prep`` — tokenisation and length counting (:meth:`EngineLane.prepare`),
  building a call's input and turning its output into translations;
* ``compute`` — the model calls themselves (CTranslate2 releases the GIL),
  one thread per model replica, so calls on different replicas run side by
  side.

Neither is the loop's default executor; Redis calls have their own
(:class:`pipeline.storage.cache.TwoLevelCache`).

:meth:`EngineLane.run_plan` runs a :class:`~pipeline.engine.batching.BatchPlan`
as a pipeline (read-ahead, as CTranslate2's own ``translate_iterable``
does): while the model computes sub-batch *k*, the prep thread builds the
input of *k + 1* and finishes *k − 1*. With a ``width`` of two or more, up
to that many of the plan's calls compute at once, one per replica. The texts
were tokenised once, by :meth:`EngineLane.prepare`, before planning.

The lane drives a translator in four stages (:class:`StagedTranslator`):
``CTranslate2Translator`` is one; :class:`WholeTexts` makes one of any
translator that only offers ``translate_batch`` and ``count_tokens``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from pipeline.contract.pairs import Pair
from pipeline.engine.batching import BatchPlan, SubBatch, TokenBudgetBatcher
from pipeline.engine.translator import Translation, Translator

T = TypeVar("T")
P = TypeVar("P", bound="Counted")

# How a model call gets to run: through the worker's priority gate, or at once.
Through = Callable[[Awaitable[Any]], Awaitable[Any]]


class Counted(Protocol):
    """A prepared text: what it costs the model, in source tokens, and its pair."""

    @property
    def tokens(self) -> int: ...

    @property
    def pair(self) -> Pair: ...


@runtime_checkable
class StagedTranslator(Protocol[P]):
    """A translator in the four stages the lane runs in different threads.

    Texts of different pairs may share a call when their :meth:`call_key`
    is the same (one model; the pair's target prefix travels per text).
    """

    def prepare(self, texts: Sequence[str], pairs: Sequence[Pair]) -> list[P]:
        """Cut and tokenise (prep thread, once per text); ``pairs[i]`` is ``texts[i]``'s."""
        ...

    def call_key(self, pair: Pair) -> Hashable:
        """Texts whose pairs have equal keys may share one model call."""
        ...

    def encode(self, prepared: Sequence[P]) -> Any:
        """The input of one model call (prep thread)."""
        ...

    def run(self, call: Any) -> Any:
        """The model call (a compute thread)."""
        ...

    def assemble(self, prepared: Sequence[P], outputs: Any) -> list[Translation]:
        """Translations from the call's output, one per prepared text (prep thread)."""
        ...


@dataclass(frozen=True, slots=True)
class CountedText:
    """A text, its token count and pair, for translators that tokenise in ``translate_batch``."""

    text: str
    tokens: int
    pair: Pair


class WholeTexts:
    """The four stages over a translator that offers only ``translate_batch``.

    Any texts share a call; the call asks ``translate_batch`` once per pair in it.
    """

    def __init__(self, translator: Translator) -> None:
        self.translator = translator

    def prepare(self, texts: Sequence[str], pairs: Sequence[Pair]) -> list[CountedText]:
        return [
            CountedText(t, self.translator.count_tokens(t, p), p)
            for t, p in zip(texts, pairs, strict=True)
        ]

    def call_key(self, pair: Pair) -> Hashable:
        return None

    def encode(self, prepared: Sequence[CountedText]) -> list[CountedText]:
        return list(prepared)

    def run(self, call: list[CountedText]) -> list[Translation]:
        out: list[Translation | None] = [None] * len(call)
        by_pair: dict[Pair, list[int]] = {}
        for i, text in enumerate(call):
            by_pair.setdefault(text.pair, []).append(i)
        for pair, indices in by_pair.items():
            done = self.translator.translate_batch([call[i].text for i in indices], pair)
            for i, translation in zip(indices, done, strict=True):
                out[i] = translation
        return [t for t in out if t is not None]

    def assemble(
        self, prepared: Sequence[CountedText], outputs: list[Translation]
    ) -> list[Translation]:
        return outputs


def staged(translator: Any) -> StagedTranslator[Any]:
    """``translator`` itself when it has the four stages, else :class:`WholeTexts` over it."""
    if isinstance(translator, StagedTranslator):
        return translator
    return WholeTexts(translator)


@dataclass(frozen=True, slots=True)
class SubBatchOutcome:
    """One planned call: its translations (in the sub-batch's order) or the error it raised."""

    sub_batch: SubBatch
    translations: list[Translation] | None
    error: Exception | None
    engine_s: float


async def _at_once(work: Awaitable[T]) -> T:
    return await work


class EngineLane(Generic[P]):
    """One translator's prep and compute executors, and the overlapped run of a plan.

    ``replicas``: the model calls that may compute at once (CTranslate2's
    ``inter_threads``); the worker's gate decides who gets them.
    """

    def __init__(self, translator: StagedTranslator[P], replicas: int = 1) -> None:
        self.translator = translator
        self.prep = ThreadPoolExecutor(1, thread_name_prefix="engine-prep")
        self.compute = ThreadPoolExecutor(replicas, thread_name_prefix="engine-compute")

    async def _in(self, executor: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    async def prepare(self, texts: Sequence[str], pairs: Sequence[Pair]) -> list[P]:
        """Cut and tokenise ``texts`` once, in the prep thread (``pairs[i]``: ``texts[i]``'s)."""
        texts, pairs = list(texts), list(pairs)
        return await self._in(self.prep, lambda: self.translator.prepare(texts, pairs))

    async def plan(self, prepared: Sequence[P], batcher: TokenBudgetBatcher) -> BatchPlan:
        """Cost-optimal sub-batches of prepared texts (by source tokens), in the prep thread."""
        lengths = [p.tokens for p in prepared]
        return await self._in(self.prep, lambda: batcher.plan(lengths))

    async def translate(
        self, prepared: Sequence[P], through: Through = _at_once
    ) -> list[Translation]:
        """One engine call on prepared texts of one call key (no overlap); raises what the
        engine raises."""
        tokens = [p.tokens for p in prepared]
        whole = SubBatch(tuple(range(len(prepared))), sum(tokens), max(tokens, default=0), 0.0)
        (outcome,) = await self.run_plan(prepared, BatchPlan((whole,)), through)
        if outcome.error is not None:
            raise outcome.error
        assert outcome.translations is not None
        return outcome.translations

    async def run_plan(
        self,
        prepared: Sequence[P],
        plan: BatchPlan,
        through: Through = _at_once,
        on_last_call: Callable[[], None] | None = None,
        width: int = 1,
    ) -> list[SubBatchOutcome]:
        """Run every sub-batch of ``plan``, overlapping calls with their neighbours' prep work.

        Each model call runs ``through`` the caller's gate (``lambda work:
        gate.run(priority, work)``); at most ``width`` of them are under way
        at once (the replicas the caller may hold). A failing call does not
        stop the others; its outcome carries the error, for the caller to
        narrow down. ``on_last_call`` runs when the plan's last call gets the
        engine (past the gate), before it computes. Outcomes are in the
        plan's order.
        """
        translator = self.translator
        groups = [[prepared[i] for i in sub.indices] for sub in plan.sub_batches]
        slots = asyncio.Semaphore(width)

        def encode(k: int) -> asyncio.Future[Any]:
            return asyncio.ensure_future(self._in(self.prep, lambda: translator.encode(groups[k])))

        async def call_and_finish(k: int, sources: Any) -> SubBatchOutcome:
            sub = plan.sub_batches[k]
            last = k + 1 == len(groups)
            try:
                outputs, engine_s = await through(
                    self._model(sources, on_last_call if last else None)
                )
            except Exception as exc:
                return SubBatchOutcome(sub, None, exc, 0.0)
            finally:
                slots.release()  # the next call may start while this one's output is read
            done = await self._in(self.prep, lambda: translator.assemble(groups[k], outputs))
            return SubBatchOutcome(sub, done, None, engine_s)

        running: list[asyncio.Task[SubBatchOutcome]] = []
        try:
            next_sources = encode(0) if groups else None
            for k in range(len(groups)):
                assert next_sources is not None
                sources = await next_sources
                await slots.acquire()
                running.append(asyncio.ensure_future(call_and_finish(k, sources)))
                # read-ahead: the next input while the model runs
                next_sources = encode(k + 1) if k + 1 < len(groups) else None
            return [await task for task in running]
        except BaseException:
            for task in running:  # cancelled, or a bug: the plan's other calls go too
                task.cancel()
            raise

    async def call(self, work: Callable[[], T]) -> T:
        """Any other blocking model call (e.g. with attention), in a compute thread."""
        return await self._in(self.compute, work)

    async def _model(
        self, sources: Any, on_start: Callable[[], None] | None = None
    ) -> tuple[Any, float]:
        """The model call in a compute thread, and its duration measured there."""
        if on_start is not None:
            on_start()

        def timed() -> tuple[Any, float]:
            began = time.perf_counter()
            outputs = self.translator.run(sources)
            return outputs, time.perf_counter() - began

        return await self._in(self.compute, timed)

    def close(self) -> None:
        """Stop both executors (after the running calls finish)."""
        self.prep.shutdown(wait=True)
        self.compute.shutdown(wait=True)
