"""Running restorations against a real translator, many requests per engine call.

:func:`drive` gathers the next calls of every unfinished
:class:`~pipeline.fidelity.restore.Restoration`, sends them to the engine in
one batch (plain ones through ``translate_batch``, aligned ones through
``translate_aligned``) and feeds the outputs back, until all are finished.
Most requests finish after the first round.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Protocol

from pipeline.contract.pairs import Pair
from pipeline.engine.capabilities import Aligning, VocabularyAware
from pipeline.engine.translator import Translation, Translator
from pipeline.fidelity.glossary import Glossary
from pipeline.fidelity.prepare import FidelityConfig, Format, prepare
from pipeline.fidelity.restore import Call, Failed, Refused, Restoration, Restored


class TranslatorEngine:
    """The engine one pair's restorations use: a :class:`Translator` and that pair."""

    def __init__(
        self, translator: Translator, pair: Pair, executor: Executor | None = None
    ) -> None:
        self.translator = translator
        self.pair = pair
        self.executor = executor

    def can_align(self) -> bool:
        """True when the translator gives attention (CTranslate2 does)."""
        return isinstance(self.translator, Aligning)

    def unknown_characters(self, text: str) -> frozenset[str]:
        """What the model's tokenizer knows only as bytes (nothing, for other translators)."""
        if isinstance(self.translator, VocabularyAware):
            return self.translator.unknown_characters(text, self.pair)
        return frozenset()

    async def translate(self, calls: Sequence[Call], pairs: Sequence[Pair]) -> list[Translation]:
        """Outputs for ``calls`` (all of this engine's pair), in order."""
        assert all(p == self.pair for p in pairs), "one pair per TranslatorEngine"
        plain = [c.text for c in calls if not c.aligned]
        aligned = [c.text for c in calls if c.aligned]
        plain_out: list[Translation] = []
        aligned_out: list[Translation] = []
        if plain:
            plain_out = list(
                await self.translator.translate_batch_async(plain, self.pair, self.executor)
            )
        if aligned:
            assert isinstance(self.translator, Aligning)
            call = functools.partial(self.translator.translate_aligned, aligned, self.pair)
            aligned_out = list(
                await asyncio.get_running_loop().run_in_executor(self.executor, call)
            )
        plain_it, aligned_it = iter(plain_out), iter(aligned_out)
        return [next(aligned_it) if c.aligned else next(plain_it) for c in calls]


class CallRunner(Protocol):
    """Runs engine calls, ``calls[i]`` for pair ``pairs[i]``; a call the engine refuses on its
    own comes back as ``Refused``."""

    async def translate(
        self, calls: Sequence[Call], pairs: Sequence[Pair]
    ) -> Sequence[Translation | Refused]: ...


async def drive(
    restorations: Sequence[Restoration], engine: CallRunner, pairs: Sequence[Pair]
) -> None:
    """Run every restoration (of pair ``pairs[i]``) to its outcome, one batched engine call
    per round: requests of different pairs of one model share it."""
    while True:
        rounds = [(r, r.calls(), pair) for r, pair in zip(restorations, pairs, strict=True)]
        flat = [call for _, calls, _ in rounds for call in calls]
        if not flat:
            return
        flat_pairs = [pair for _, calls, pair in rounds for _ in calls]
        outputs = iter(await engine.translate(flat, flat_pairs))
        for restoration, calls, _ in rounds:
            if calls:
                restoration.feed([next(outputs) for _ in calls])


async def translate_text(
    text: str,
    fmt: Format,
    engine: TranslatorEngine,
    config: FidelityConfig | None = None,
    glossary: Glossary | None = None,
) -> Restored | Failed:
    """One text through prepare → engine → restore (raises ``BadMarkup``)."""
    prepared = prepare(text, fmt, config or FidelityConfig(), glossary)
    restoration = Restoration(prepared, engine)
    await drive([restoration], engine, [engine.pair])
    return restoration.outcome()
