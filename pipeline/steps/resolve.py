"""resolve: turn what the steps found into exactly one result per request."""

from __future__ import annotations

from typing import ClassVar

from pipeline.steps.base import Batch, Fields


class Resolve:
    """Gives every pending decoded item its result.

    Reads: ``translation``/``cache`` or ``error``/``reason``; copies take their
    leader's outcome (cache level ``window``: answered by in-batch dedup).
    Resolves: ``ok`` and ``error`` results. Raises: nothing.
    """

    reads: ClassVar[Fields] = frozenset({"translation"})
    sets: ClassVar[Fields] = frozenset({"result"})

    async def __call__(self, batch: Batch) -> None:
        for item in batch.pending():
            if item.request is None:
                continue
            source = item.leader or item
            if source.translation is not None:
                value = source.translation
                batch.resolve(
                    item,
                    "ok",
                    translation=value.text,
                    model=value.model,
                    cache="window" if item.leader else source.cache,
                    batch_size=source.engine_batch_size,
                    input_tokens=value.input_tokens,
                    output_tokens=value.output_tokens,
                    **value.extra,
                )
            else:
                batch.resolve(
                    item,
                    "error",
                    error=source.error or "not translated",
                    reason=source.reason,
                    model=batch.model_id,
                    batch_size=source.engine_batch_size,
                )
        batch.count_outcomes()
