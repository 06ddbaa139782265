"""Length-sorted batches under a token budget (engines.batching): padded rows x longest row, or packed rows' sum,
within the budget; a row over the budget, or at least ``alone_from`` long, alone."""

from hypothesis import given
from hypothesis import strategies as st

from mia_fast.engines.batching import plan_batches


@given(st.lists(st.integers(1, 100), max_size=60), st.integers(1, 400))
def test_batches_respect_budget_and_cover_all(lengths, budget):
    batches = plan_batches(lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        width = max(lengths[i] for i in batch)
        assert len(batch) == 1 or width * len(batch) <= budget


@given(st.lists(st.integers(1, 100), max_size=60), st.integers(1, 400))
def test_packed_batches_hold_at_most_the_budget_in_total(lengths, budget):
    batches = plan_batches(lengths, budget, packed=True)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(batch) == 1 or sum(lengths[i] for i in batch) <= budget for batch in batches)


def test_padded_rows_are_grouped_longest_first_until_the_budget():
    # 8 and 5 pad to 2 x 8 = 16; 3 would make 3 x 8; then 3 and 1 pad to 2 x 3.
    assert plan_batches([5, 3, 8, 1], 16) == [[2, 0], [1, 3]]
    assert plan_batches([3, 3, 3], 9) == [[0, 1, 2]]  # ties keep their order
    assert plan_batches([], 16) == []


def test_packed_rows_are_grouped_by_their_sum():
    assert plan_batches([5, 3, 8, 1], 10, packed=True) == [[2], [0, 1, 3]]


def test_a_row_over_the_budget_or_long_enough_to_be_alone_gets_a_batch_of_its_own():
    assert plan_batches([50, 2], 10) == [[0], [1]]
    assert plan_batches([5, 3, 8, 1], 100, alone_from=5) == [[2], [0], [1, 3]]
    assert plan_batches([5, 3, 8, 1], 100) == [[2, 0, 1, 3]]
