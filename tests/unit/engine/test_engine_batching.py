"""Token-budget batching: every input once, order restorable, budget respected."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.engine.batching import TokenBudgetBatcher, restore_order
from pipeline.engine.costs import CostModel

lengths_st = st.lists(st.integers(min_value=0, max_value=300), max_size=200)


@given(lengths=lengths_st, budget=st.integers(1, 5000), max_size=st.none() | st.integers(1, 64))
def test_every_input_once_and_budget_respected(lengths, budget, max_size):
    plan = TokenBudgetBatcher(budget, max_size).plan(lengths)
    flat = [i for batch in plan.batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    for batch in plan.batches:
        assert batch
        longest = max(lengths[i] for i in batch)
        if len(batch) > 1:  # a lone over-long item is the only exception
            assert longest * len(batch) <= budget
        if max_size is not None:
            assert len(batch) <= max_size
    assert plan.real_tokens == sum(lengths)
    assert plan.padded_tokens == sum(max(lengths[i] for i in b) * len(b) for b in plan.batches)
    assert 0.0 <= plan.padding_ratio < 1.0 or plan.padded_tokens == 0


@given(lengths=lengths_st, budget=st.integers(1, 5000))
def test_restore_order_inverts_the_plan(lengths, budget):
    plan = TokenBudgetBatcher(budget).plan(lengths)
    results = [[f"r{i}" for i in batch] for batch in plan.batches]
    assert restore_order(plan.batches, results) == [f"r{i}" for i in range(len(lengths))]


def test_sorting_keeps_padding_low():
    lengths = [5, 100, 6, 98, 7, 99, 5, 101]
    plan = TokenBudgetBatcher(token_budget=404).plan(lengths)
    assert [sorted(lengths[i] for i in b) for b in plan.batches] == [
        [5, 5, 6, 7],
        [98, 99, 100, 101],
    ]
    # 4*7 + 4*101 padded tokens for 421 real ones
    assert plan.padded_tokens == 432
    assert plan.padding_ratio == pytest.approx(11 / 432)


def test_over_long_item_gets_its_own_batch():
    plan = TokenBudgetBatcher(token_budget=10).plan([3, 50, 3])
    assert plan.batches == ((0, 2), (1,))


def test_empty_and_invalid_input():
    plan = TokenBudgetBatcher(10).plan([])
    assert plan.batches == () and plan.padding_ratio == 0.0
    with pytest.raises(ValueError):
        TokenBudgetBatcher(0)
    with pytest.raises(ValueError):
        TokenBudgetBatcher(10, 0)
    with pytest.raises(ValueError):
        TokenBudgetBatcher(10).plan([-1])
    with pytest.raises(ValueError):
        restore_order([(0, 1)], [["a"]])
    with pytest.raises(ValueError):
        restore_order([(0,), (0,)], [["a"], ["b"]])


# --- cost-based cut points -------------------------------------------------


def _brute_force(sorted_lengths, allowed, seconds):
    """Every way to cut the sorted run (2^(n-1)); the cheapest allowed one."""
    n = len(sorted_lengths)
    best = (float("inf"), None)
    for mask in range(1 << max(n - 1, 0)):
        cuts = [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        total, start, ok = 0.0, 0, True
        for end in cuts:
            size, longest = end - start, sorted_lengths[end - 1]
            if not allowed(size, longest):
                ok = False
                break
            total += seconds(size, longest)
            start = end
        if ok and total < best[0] - 1e-12:
            best = (total, cuts)
    return best


costs_st = st.builds(
    CostModel,
    per_call_s=st.floats(0.0, 1.0),
    per_step_s=st.floats(0.0, 0.1),
    per_token_s=st.floats(0.001, 0.01),
)


@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=10),
    cost=costs_st,
    budget=st.integers(1, 400),
    max_size=st.none() | st.integers(1, 6),
    max_call_s=st.none() | st.floats(0.05, 5.0),
)
def test_cut_points_match_brute_force(lengths, cost, budget, max_size, max_call_s):
    batcher = TokenBudgetBatcher(budget, max_size, cost=cost, max_call_s=max_call_s)
    plan = batcher.plan(lengths)
    best, _ = _brute_force(sorted(lengths), batcher._allowed, cost.seconds)
    assert plan.estimated_s == pytest.approx(best, rel=1e-9, abs=1e-12)
    for sub in plan.sub_batches:
        assert batcher._allowed(len(sub.indices), sub.max_len)


def test_cheap_calls_cut_at_the_length_jump():
    # 4 short, 2 long: one call each side of the jump beats padding the short ones
    cost = CostModel(per_call_s=0.01, per_step_s=0.0, per_token_s=0.001)
    plan = TokenBudgetBatcher(10_000, cost=cost).plan([2, 50, 2, 3, 50, 2])
    assert [sorted(b) for b in plan.batches] == [[0, 2, 3, 5], [1, 4]]
    # 4*3 + 2*50 padded for 109 real tokens
    assert plan.padded_tokens == 112
    assert plan.estimated_s == pytest.approx(2 * 0.01 + 0.001 * 112)


def test_expensive_calls_keep_one_batch():
    # a call costs as much as 1000 padded tokens: padding the short ones is cheaper
    cost = CostModel(per_call_s=1.0, per_step_s=0.0, per_token_s=0.001)
    plan = TokenBudgetBatcher(10_000, cost=cost).plan([2, 50, 2, 3, 50, 2])
    assert len(plan.batches) == 1
    assert plan.padding_ratio == pytest.approx((300 - 109) / 300)


def test_per_step_cost_counts_the_longest_member():
    # per-step cost makes a short extra call cheap (few steps): 8 at 4 and 2 at 40.
    # one call: 40 steps + 10*40 tokens; two: 4 + 8*4 and 40 + 2*40 (+ 2 calls)
    cost = CostModel(per_call_s=0.05, per_step_s=0.01, per_token_s=0.001)
    lengths = [4] * 8 + [40, 40]
    plan = TokenBudgetBatcher(10_000, cost=cost).plan(lengths)
    assert [len(b) for b in plan.batches] == [8, 2]
    one_call = cost.seconds(10, 40)
    assert plan.estimated_s == pytest.approx(cost.seconds(8, 4) + cost.seconds(2, 40))
    assert plan.estimated_s < one_call


def test_max_call_seconds_bounds_each_call():
    cost = CostModel(per_call_s=0.001, per_step_s=0.0, per_token_s=0.001)
    plan = TokenBudgetBatcher(10_000, cost=cost, max_call_s=0.05).plan([10] * 12)
    # 4 sequences of 10 tokens = 41 ms, 5 would be 51 ms: three calls of 4
    assert [len(b) for b in plan.batches] == [4, 4, 4]
    assert all(sub.estimated_s <= 0.05 for sub in plan.sub_batches)


def test_padding_per_sub_batch():
    cost = CostModel(per_call_s=0.01, per_step_s=0.0, per_token_s=0.001)
    plan = TokenBudgetBatcher(10_000, cost=cost).plan([2, 4, 40, 40])
    ratios = [sub.padding_ratio for sub in plan.sub_batches]
    assert ratios == [pytest.approx(2 / 8), 0.0]
