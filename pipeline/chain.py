"""The translation chain a worker runs on each micro-batch.

deadline check → in-batch dedup → dedup window → cache (L1, L2) →
token-budget sub-batches → translate (narrowing failures down) → cache and
window store → results. Every step is a small function or class and the
chain knows nothing about Kafka: the Faust agent hands it decoded requests
and publishes what it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.cache import CachedTranslation, TwoLevelCache
from pipeline.engine.batching import TokenBudgetBatcher
from pipeline.engine.translator import Translation, Translator
from pipeline.messages import CacheLevel, TranslationRequest, TranslationResult, now_ms
from pipeline.pairs import Pair
from pipeline.scheduling import INTERACTIVE, PriorityGate

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One accepted request and its digest (the pair topic's key)."""

    request: TranslationRequest
    digest: str


class DedupWindow(Protocol):
    """Recent translations by digest (a Faust windowed table in the worker)."""

    def get(self, item: WorkItem) -> CachedTranslation | None: ...

    def put(self, item: WorkItem, value: CachedTranslation) -> None: ...


@dataclass
class BatchStats:
    """What one micro-batch did, for metrics and benchmarks."""

    size: int = 0
    timeouts: int = 0
    errors: int = 0
    by_cache: dict[str, int] = field(default_factory=dict)
    engine_texts: int = 0
    engine_batches: list[int] = field(default_factory=list)
    padding_ratio: float = 0.0
    # time inside the engine and the tokens it read / wrote (for tokens/s)
    engine_seconds: float = 0.0
    engine_input_tokens: int = 0
    engine_output_tokens: int = 0
    # set when the batch failed outside the engine and every request got an error
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the chain decided for one distinct digest."""

    value: CachedTranslation | None
    cache: CacheLevel
    error: str | None = None
    batch_size: int | None = None


def split_expired(
    items: Sequence[WorkItem], now: int, default_timeout_ms: int
) -> tuple[list[WorkItem], list[WorkItem]]:
    """(live, expired): expired requests never reach the engine."""
    live, expired = [], []
    for item in items:
        deadline = item.request.deadline_ms(default_timeout_ms)
        (expired if now >= deadline else live).append(item)
    return live, expired


def group_by_digest(items: Sequence[WorkItem]) -> dict[str, list[WorkItem]]:
    """In-batch dedup: identical digests are translated once (insertion-ordered)."""
    groups: dict[str, list[WorkItem]] = {}
    for item in items:
        groups.setdefault(item.digest, []).append(item)
    return groups


class EngineRunner:
    """Translates distinct texts in token-budget sub-batches.

    A failing sub-batch is bisected until the failing texts are isolated, so
    one poison input costs only its own request.
    """

    def __init__(
        self,
        translator: Translator,
        batcher: TokenBudgetBatcher,
        gate: PriorityGate | None = None,
        priority: int = INTERACTIVE,
    ) -> None:
        self._translator = translator
        self._batcher = batcher
        self._gate = gate or PriorityGate()
        self._priority = priority

    async def run(
        self, texts: Sequence[str], pair: Pair, stats: BatchStats
    ) -> list[Translation | Exception]:
        lengths = [self._translator.count_tokens(t, pair) for t in texts]
        plan = self._batcher.plan(lengths)
        stats.padding_ratio = plan.padding_ratio
        out: list[Translation | Exception] = [RuntimeError("not translated")] * len(texts)
        for indices in plan.batches:
            stats.engine_batches.append(len(indices))
            began = time.perf_counter()
            results = await self._translate_narrowing([texts[i] for i in indices], pair)
            stats.engine_seconds += time.perf_counter() - began
            for i, result in zip(indices, results, strict=True):
                out[i] = result
                if not isinstance(result, Exception):
                    stats.engine_input_tokens += result.input_tokens
                    stats.engine_output_tokens += result.output_tokens
        stats.engine_texts += len(texts)
        return out

    async def _translate_narrowing(
        self, texts: list[str], pair: Pair
    ) -> list[Translation | Exception]:
        try:
            async with self._gate.hold(self._priority):
                return list(await self._translator.translate_batch_async(texts, pair))
        except Exception as exc:
            if len(texts) == 1:
                log.warning("translation failed for one text: %s", exc)
                return [exc]
            mid = len(texts) // 2
            head = await self._translate_narrowing(texts[:mid], pair)
            tail = await self._translate_narrowing(texts[mid:], pair)
            return head + tail


class TranslationChain:
    """Turns one micro-batch of requests for one pair into one result per request."""

    def __init__(
        self,
        *,
        pair: Pair,
        engine: EngineRunner,
        model_id: str,
        cache: TwoLevelCache,
        window: DedupWindow,
        default_timeout_ms: int,
        worker: str,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._pair = pair
        self._engine = engine
        self._model_id = model_id
        self._cache = cache
        self._window = window
        self._default_timeout_ms = default_timeout_ms
        self._worker = worker
        self._clock = clock

    async def process(
        self, items: Sequence[WorkItem]
    ) -> tuple[list[TranslationResult], BatchStats]:
        """Results in input order, one per item; never raises for a bad batch.

        Engine failures are narrowed down to their requests inside; anything
        else that breaks (a bug, a failing table) turns the whole batch into
        ``error`` results, so every request still ends as a result and the
        agent keeps running.
        """
        try:
            return await self._process(items)
        except Exception as exc:
            log.exception("micro-batch of %d failed outside the engine", len(items))
            failure = f"{type(exc).__name__}: {exc}"
            done = self._clock()
            results = [
                TranslationResult.for_request(
                    item.request, status="error", error=failure, model=self._model_id,
                    completed_at=done, worker=self._worker,
                )
                for item in items
            ]
            return results, BatchStats(size=len(items), errors=len(items), failure=failure)

    async def _process(
        self, items: Sequence[WorkItem]
    ) -> tuple[list[TranslationResult], BatchStats]:
        stats = BatchStats(size=len(items))
        started = self._clock()
        live, expired = split_expired(items, started, self._default_timeout_ms)
        groups = group_by_digest(live)
        outcomes = await self._resolve(groups, stats)
        done = self._clock()

        by_id: dict[int, TranslationResult] = {}
        for item in expired:
            by_id[id(item)] = TranslationResult.for_request(
                item.request, status="timeout", started_at=started, completed_at=done,
                worker=self._worker, error="deadline passed before translation",
            )
        for digest, group in groups.items():
            outcome = outcomes[digest]
            for position, item in enumerate(group):
                # Later copies of a digest in the same batch are answered by dedup.
                cache: CacheLevel = outcome.cache if position == 0 else "window"
                by_id[id(item)] = self._result(item, outcome, cache, started, done)
        results = [by_id[id(item)] for item in items]
        for result in results:
            if result.status == "ok" and result.cache:
                stats.by_cache[result.cache] = stats.by_cache.get(result.cache, 0) + 1
        stats.timeouts = len(expired)
        stats.errors = sum(r.status == "error" for r in results)
        return results, stats

    def _result(
        self, item: WorkItem, outcome: Outcome, cache: CacheLevel, started: int, done: int
    ) -> TranslationResult:
        if outcome.value is None:
            return TranslationResult.for_request(
                item.request, status="error", error=outcome.error, model=self._model_id,
                started_at=started, completed_at=done, worker=self._worker,
                batch_size=outcome.batch_size,
            )
        value = outcome.value
        return TranslationResult.for_request(
            item.request,
            status="ok",
            completed_at=done,
            translation=value.text,
            model=value.model,
            cache=cache,
            started_at=started,
            batch_size=outcome.batch_size,
            input_tokens=value.input_tokens,
            output_tokens=value.output_tokens,
            worker=self._worker,
        )

    async def _resolve(
        self, groups: dict[str, list[WorkItem]], stats: BatchStats
    ) -> dict[str, Outcome]:
        outcomes: dict[str, Outcome] = {}
        for digest, group in groups.items():
            remembered = self._window.get(group[0])
            if remembered is not None:
                outcomes[digest] = Outcome(remembered, "window")
        pending = [d for d in groups if d not in outcomes]
        for digest, (hit, level) in (await self._cache.get_many(pending)).items():
            outcomes[digest] = Outcome(hit, level)
            self._window.put(groups[digest][0], hit)
        misses = [d for d in pending if d not in outcomes]
        if not misses:
            return outcomes

        texts = [groups[d][0].request.text for d in misses]
        translated = await self._engine.run(texts, self._pair, stats)
        batch_size = len(misses)
        fresh: dict[str, CachedTranslation] = {}
        for digest, result in zip(misses, translated, strict=True):
            if isinstance(result, Exception):
                outcomes[digest] = Outcome(
                    None, "miss", error=f"{type(result).__name__}: {result}",
                    batch_size=batch_size,
                )
                continue
            value = CachedTranslation(
                result.text, self._model_id, result.input_tokens, result.output_tokens
            )
            fresh[digest] = value
            outcomes[digest] = Outcome(value, "miss", batch_size=batch_size)
            self._window.put(groups[digest][0], value)
        await self._cache.put_many(fresh)
        return outcomes
