"""Token-budget batching: similar lengths together, so padding stays low.

A model pads every sequence of a batch to the longest one, so a batch costs
``max_len * n`` tokens of compute. :class:`TokenBudgetBatcher` sorts items by
length and cuts the sorted run into sub-batches whose padded cost stays
within a token budget (and whose size stays within a maximum), then reports
the padding ratio it achieved: pad tokens / all (padded) tokens.

An item longer than the whole budget cannot be made to fit; it gets a
sub-batch of its own rather than being dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Sub-batches as tuples of original indices, with their token accounting."""

    batches: tuple[tuple[int, ...], ...]
    real_tokens: int
    padded_tokens: int

    @property
    def pad_tokens(self) -> int:
        """Tokens spent on padding."""
        return self.padded_tokens - self.real_tokens

    @property
    def padding_ratio(self) -> float:
        """Pad tokens / all padded tokens; 0.0 for an empty plan."""
        return self.pad_tokens / self.padded_tokens if self.padded_tokens else 0.0


class TokenBudgetBatcher:
    """Split items into length-sorted sub-batches bounded by a padded-token budget."""

    def __init__(self, token_budget: int, max_batch_size: int | None = None) -> None:
        """``token_budget`` bounds ``max_len * n`` of a sub-batch; ``max_batch_size`` its ``n``."""
        if token_budget < 1:
            raise ValueError("token_budget must be >= 1")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size

    def plan(self, lengths: Sequence[int]) -> BatchPlan:
        """Plan sub-batches for items of the given token ``lengths``."""
        if any(n < 0 for n in lengths):
            raise ValueError("token lengths must be >= 0")
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        batches: list[tuple[int, ...]] = []
        current: list[int] = []
        padded = 0
        for i in order:
            n = len(current) + 1
            # sorted ascending: the newcomer is the longest of the batch
            fits = lengths[i] * n <= self.token_budget
            if current and (not fits or (self.max_batch_size and n > self.max_batch_size)):
                padded += lengths[current[-1]] * len(current)
                batches.append(tuple(current))
                current = []
            current.append(i)
        if current:
            padded += lengths[current[-1]] * len(current)
            batches.append(tuple(current))
        return BatchPlan(tuple(batches), sum(lengths), padded)


def restore_order(batches: Sequence[Sequence[int]], results: Sequence[Sequence[T]]) -> list[T]:
    """Put per-sub-batch ``results`` back in the original input order.

    ``results[k][j]`` is the result for original index ``batches[k][j]``.
    """
    size = sum(len(b) for b in batches)
    out: list[T | None] = [None] * size
    seen = [False] * size
    for batch, batch_results in zip(batches, results, strict=True):
        if len(batch) != len(batch_results):
            raise ValueError("each sub-batch needs exactly one result per item")
        for index, result in zip(batch, batch_results, strict=True):
            if seen[index]:
                raise ValueError(f"index {index} appears in more than one sub-batch")
            seen[index] = True
            out[index] = result
    return out  # type: ignore[return-value]  # every slot was filled exactly once
