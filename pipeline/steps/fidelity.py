"""fidelity: glossaries before the caches, prepare → engine → restore instead of plain translate.

See :mod:`pipeline.fidelity` for what is protected and how outputs are checked.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import ClassVar

from pipeline.contract.pairs import Pair
from pipeline.engine.capabilities import Aligning, VocabularyAware
from pipeline.engine.translator import Translation
from pipeline.fidelity.drive import drive
from pipeline.fidelity.glossary_store import GlossaryUnavailable
from pipeline.fidelity.restore import Call, Failed, Refused, Restoration
from pipeline.fidelity.service import FidelityService, Rejected, result_fields
from pipeline.steps.base import Batch, BatchStats, Fields, Item, TransientError
from pipeline.steps.in_flight import InFlightTexts
from pipeline.steps.translate import EngineRejected, EngineRunner
from pipeline.storage.cache import CachedTranslation


class ApplyGlossary:
    """Finds each request's glossary and keys the request by that glossary's version.

    Reads: ``request`` (``glossary``, ``terms``, ``tenant``). Sets:
    ``glossary`` and ``digest`` (with the glossary version, so a changed
    glossary never hits an entry made with the old one); a named glossary
    that does not exist sets ``error`` with reason ``glossary_not_found``.
    Raises: :class:`TransientError` when Redis cannot be read and the worker
    holds no copy of the glossary.
    """

    reads: ClassVar[Fields] = frozenset({"request"})
    sets: ClassVar[Fields] = frozenset({"glossary", "digest"})

    def __init__(self, service: FidelityService) -> None:
        self._service = service

    async def __call__(self, batch: Batch) -> None:
        for item in batch.pending():
            request = item.request
            if request is None or (request.glossary is None and not request.terms):
                continue
            try:
                found = await asyncio.to_thread(self._service.glossary, request)
            except GlossaryUnavailable as exc:
                raise TransientError(str(exc)) from exc
            if isinstance(found, Rejected):
                item.error, item.reason = found.message, found.reason
                continue
            item.glossary = found
            item.digest = self._service.digest(request, batch.model_id, found)


class TranslateFaithfully:
    """Translates every unanswered item through prepare → engine → restore.

    Reads: ``request`` and ``glossary`` of unanswered leaders. Sets:
    ``translation`` (cache level ``miss``, or ``window`` for a text an earlier
    batch in flight was translating, :class:`~pipeline.steps.in_flight.InFlightTexts`;
    its ``extra`` holds the fidelity verdict, glossary hits and version) or ``error`` with reason
    ``bad_markup``, ``bad_output`` or ``engine_rejected``. Raises:
    :class:`TransientError` when the engine as a whole fails. All segments of
    the batch go through the :class:`EngineRunner` together (token budgets,
    narrowing to the poison input, canary); retries are rounds of their own.
    """

    reads: ClassVar[Fields] = frozenset({"request", "glossary", "leader"})
    sets: ClassVar[Fields] = frozenset({"translation", "error"})

    def __init__(self, runner: EngineRunner, service: FidelityService, recent: int) -> None:
        """``recent``: settled translations kept for later batches (``InFlightTexts``)."""
        self._runner = runner
        self._service = service
        self._in_flight = InFlightTexts(recent)

    async def __call__(self, batch: Batch) -> None:
        todo = [item for item in batch.unanswered() if item.request is not None]
        if not todo:
            return
        await self._in_flight.translate(todo, functools.partial(self._translate, batch))

    async def _translate(self, batch: Batch, todo: list[Item]) -> None:
        if not todo:
            return
        calls = _BatchCalls(self._runner, batch.stats, batch.cues.last_call_started)
        started: list[tuple[Item, Restoration]] = []
        for item in todo:
            assert item.request is not None
            prepared = self._service.prepare(item.request, item.glossary)
            if isinstance(prepared, Rejected):
                item.error, item.reason = prepared.message, prepared.reason
                continue
            started.append((item, Restoration(prepared, calls.of(item.request.pair))))
        await drive(
            [r for _, r in started],
            calls,
            [item.request.pair for item, _ in started if item.request is not None],
        )
        outcomes = [(item, restoration.outcome()) for item, restoration in started]
        self._runner.observe(
            batch, [o.input_tokens for _, o in outcomes if not isinstance(o, Failed)]
        )
        for item, outcome in outcomes:
            item.engine_batch_size = len(todo)
            if isinstance(outcome, Failed):
                item.error, item.reason = outcome.message, outcome.reason
                continue
            extra = result_fields(outcome, item.glossary)
            item.cache = "miss"
            item.translation = CachedTranslation(
                extra.pop("translation"),
                batch.model_id,
                extra.pop("input_tokens"),
                extra.pop("output_tokens"),
                extra,
            )


class _PairView:
    """The engine as one request's restoration sees it (its pair's vocabulary)."""

    def __init__(
        self, runner: EngineRunner, pair: Pair, vocabulary: VocabularyAware | None
    ) -> None:
        self._runner = runner
        self._pair = pair
        self._vocabulary = vocabulary

    def can_align(self) -> bool:
        return isinstance(self._runner.translator, Aligning)

    def unknown_characters(self, text: str) -> frozenset[str]:
        if self._vocabulary is None:
            return frozenset()
        return self._vocabulary.unknown_characters(text, self._pair)


class _BatchCalls:
    """The engine as one batch's restorations see it: every round one engine run, the
    texts of all pairs together.

    ``last_call_started`` is announced by a round without aligned calls (one
    that needs another round, rarely, then queues behind the next batch's calls).
    """

    def __init__(
        self, runner: EngineRunner, stats: BatchStats, last_call_started: Callable[[], None]
    ) -> None:
        self._runner = runner
        self._stats = stats
        self._last_call_started = last_call_started
        # a protocol check costs microseconds: once a batch, not once a segment
        translator = runner.translator
        self._vocabulary = translator if isinstance(translator, VocabularyAware) else None

    def of(self, pair: Pair) -> _PairView:
        """What a restoration of ``pair`` asks beyond the calls."""
        return _PairView(self._runner, pair, self._vocabulary)

    async def translate(
        self, calls: Sequence[Call], pairs: Sequence[Pair]
    ) -> list[Translation | Refused]:
        plain = [(c, p) for c, p in zip(calls, pairs, strict=True) if not c.aligned]
        aligned = [(c, p) for c, p in zip(calls, pairs, strict=True) if c.aligned]
        announce = None if aligned else self._last_call_started
        plain_out = (
            await self._runner.run(
                [c.text for c, _ in plain], [p for _, p in plain], self._stats, announce
            )
            if plain
            else []
        )
        aligned_out: list[Translation] = []
        by_pair: dict[Pair, list[int]] = {}
        for i, (_, pair) in enumerate(aligned):
            by_pair.setdefault(pair, []).append(i)
        done: dict[int, Translation] = {}
        for pair, indices in by_pair.items():  # attention calls are rare: one per pair
            got = await self._runner.run_aligned(
                [aligned[i][0].text for i in indices], pair, self._stats
            )
            done.update(zip(indices, got, strict=True))
        aligned_out = [done[i] for i in range(len(aligned))]
        plain_it, aligned_it = iter(plain_out), iter(aligned_out)
        out: list[Translation | Refused] = []
        for call in calls:
            result = next(aligned_it) if call.aligned else next(plain_it)
            out.append(Refused(result.error) if isinstance(result, EngineRejected) else result)
        return out
