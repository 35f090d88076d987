"""Cost-based bucketing: cut a length-sorted micro-batch where it is cheapest.

A model pads every sequence of an engine call to the longest one, so a call
of ``n`` sequences costs ``n * max_len`` padded tokens plus a fixed and a
length-dependent part per call (:class:`~pipeline.engine.costs.CostModel`).
:class:`TokenBudgetBatcher` sorts the items by length and chooses the cut
points of that sorted run that minimise the estimated total time — one call
per cut — by dynamic programming over the cut positions (exact, O(n·k) for
sub-batches of at most k items). Greedy filling up to the budget padded a
mixed micro-batch to its longest member; here a long tail gets its own call
as soon as the padding it would cost outweighs a call, and similar lengths
stay together in large calls.

Constraints: a sub-batch's padded tokens stay within ``token_budget``, its
size within ``max_batch_size`` and its estimated time within
``max_call_s`` (bulk work: a running call cannot be pre-empted, so its
length bounds how long interactive work waits). An item that breaks a
constraint on its own gets a sub-batch of its own rather than being dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pipeline.engine.costs import DEFAULT_COST, CostModel

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SubBatch:
    """One planned engine call: original indices (shortest first) and its token accounting."""

    indices: tuple[int, ...]
    real_tokens: int
    max_len: int
    estimated_s: float

    @property
    def padded_tokens(self) -> int:
        return self.max_len * len(self.indices)

    @property
    def padding_ratio(self) -> float:
        """Pad tokens / padded tokens of this call; 0.0 when it has no tokens."""
        padded = self.padded_tokens
        return (padded - self.real_tokens) / padded if padded else 0.0


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Sub-batches as tuples of original indices, with their token accounting."""

    sub_batches: tuple[SubBatch, ...]

    @property
    def batches(self) -> tuple[tuple[int, ...], ...]:
        """Original indices of each sub-batch, in the order to run them."""
        return tuple(b.indices for b in self.sub_batches)

    @property
    def real_tokens(self) -> int:
        return sum(b.real_tokens for b in self.sub_batches)

    @property
    def padded_tokens(self) -> int:
        return sum(b.padded_tokens for b in self.sub_batches)

    @property
    def pad_tokens(self) -> int:
        """Tokens spent on padding."""
        return self.padded_tokens - self.real_tokens

    @property
    def padding_ratio(self) -> float:
        """Pad tokens / all padded tokens; 0.0 for an empty plan."""
        return self.pad_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def estimated_s(self) -> float:
        """Estimated engine time of the whole plan."""
        return sum(b.estimated_s for b in self.sub_batches)


class TokenBudgetBatcher:
    """Length-sorted sub-batches with cost-optimal cut points, bounded by a token budget."""

    def __init__(
        self,
        token_budget: int,
        max_batch_size: int | None = None,
        *,
        cost: CostModel = DEFAULT_COST,
        max_call_s: float | None = None,
    ) -> None:
        """``token_budget`` bounds ``max_len * n`` of a sub-batch, ``max_batch_size`` its ``n``,
        ``max_call_s`` its estimated seconds under ``cost``."""
        if token_budget < 1:
            raise ValueError("token_budget must be >= 1")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_call_s is not None and max_call_s <= 0:
            raise ValueError("max_call_s must be > 0")
        self.token_budget = token_budget
        self.max_batch_size = max_batch_size
        self.cost = cost
        self.max_call_s = max_call_s

    def plan(self, lengths: Sequence[int]) -> BatchPlan:
        """Plan sub-batches for items of the given token ``lengths``."""
        if any(n < 0 for n in lengths):
            raise ValueError("token lengths must be >= 0")
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
        sorted_lengths = [lengths[i] for i in order]
        cuts = optimal_cuts(sorted_lengths, self._allowed, self.cost.seconds)
        sub_batches = []
        for start, end in itertools.pairwise([0, *cuts]):
            chunk = sorted_lengths[start:end]
            sub_batches.append(
                SubBatch(
                    indices=tuple(order[start:end]),
                    real_tokens=sum(chunk),
                    max_len=chunk[-1],
                    estimated_s=self.cost.seconds(len(chunk), chunk[-1]),
                )
            )
        return BatchPlan(tuple(sub_batches))

    def _allowed(self, n: int, max_len: int) -> bool:
        """May ``n`` sequences padded to ``max_len`` share one call?"""
        if n == 1:
            return True  # an item that cannot fit anywhere still gets translated
        if self.max_batch_size is not None and n > self.max_batch_size:
            return False
        if n * max_len > self.token_budget:
            return False
        return self.max_call_s is None or self.cost.seconds(n, max_len) <= self.max_call_s


def optimal_cuts(
    sorted_lengths: Sequence[int],
    allowed: Callable[[int, int], bool],
    seconds: Callable[[int, int], float],
) -> list[int]:
    """End positions of the sub-batches minimising the summed ``seconds(n, max_len)``.

    ``sorted_lengths`` ascend, so a sub-batch ``[i, j)`` has ``max_len =
    sorted_lengths[j - 1]``. ``allowed(n, max_len)`` must be monotone (a
    sub-batch that is not allowed stays not allowed when it grows to the
    left), which lets the scan stop early. Returns cut positions, the last
    one ``len(sorted_lengths)``; empty for no items.
    """
    n = len(sorted_lengths)
    best = [0.0] + [float("inf")] * n
    start_of = [0] * (n + 1)
    for end in range(1, n + 1):
        longest = sorted_lengths[end - 1]
        for start in range(end - 1, -1, -1):
            size = end - start
            if not allowed(size, longest):
                break
            total = best[start] + seconds(size, longest)
            if total < best[end]:
                best[end], start_of[end] = total, start
    cuts = []
    end = n
    while end > 0:
        cuts.append(end)
        end = start_of[end]
    return cuts[::-1]


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
