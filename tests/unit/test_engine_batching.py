"""Token-budget batching: every input once, order restorable, budget respected."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.engine.batching import TokenBudgetBatcher, restore_order

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
