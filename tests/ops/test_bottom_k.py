"""Min-K%'s reduction by hand: the counts max(1, floor(k n)), the mean of each text's lowest values for every k (an
empty text NaN), texts of one length side by side and ragged ones alike, across blocks, and bad k refused."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.ops import bottom_k
from mia_fast.ops.bottom_k import bottom_k_counts, bottom_k_means


def test_counts_by_hand():
    counts = bottom_k_counts(np.array([1, 5, 10, 0]), [0.1, 0.5, 1.0])
    assert counts.tolist() == [[1, 1, 1], [1, 2, 5], [1, 5, 10], [1, 1, 1]]
    assert bottom_k_counts(np.array([10]), [0.3]).tolist() == [[3]]  # 0.3 * 10 in float64 is 3, not 2.9999


def test_means_by_hand():
    values = np.array([3, 1, 2, 5, -1, 4, 0], dtype=np.float32)
    means = bottom_k_means(values, np.array([0, 3, 3, 7]), [0.5, 1.0])
    np.testing.assert_array_equal(means, [[1.0, 2.0], [np.nan, np.nan], [-0.5, 2.0]])


def test_texts_of_one_length_side_by_side_and_ragged_texts_agree():
    values = np.array([3, 1, 2, 9, 8, 7, 0, 5, 4], dtype=np.float32)
    same = bottom_k_means(values, np.array([0, 3, 6, 9]), [0.34, 0.67])
    ragged = bottom_k_means(values, np.array([0, 3, 5, 9]), [0.34, 0.67])
    np.testing.assert_array_equal(same, [[1.0, 1.5], [7.0, 7.5], [0.0, 2.0]])
    np.testing.assert_array_equal(ragged, [[1.0, 1.5], [8.0, 8.0], [0.0, 2.0]])


def test_blocks_of_any_size_give_the_means_of_a_sort_per_text(monkeypatch):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 30, 40)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.normal(size=offsets[-1]).astype(np.float32)
    ks = [0.05, 0.3, 1.0]
    expected = np.full((len(lengths), len(ks)), np.nan)
    for text, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        ordered = np.sort(values[start:end].astype(np.float64))
        for column, count in enumerate(bottom_k_counts(np.array([end - start]), ks)[0]):
            expected[text, column] = ordered[:count].mean() if end > start else np.nan
    for cells in (8, 64, 1 << 22):
        monkeypatch.setattr(bottom_k, "_BLOCK_CELLS", cells)
        np.testing.assert_allclose(bottom_k_means(values, offsets, ks), expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("ks", [[], [0.0], [1.5], [0.2, -0.1]])
def test_k_outside_0_1_is_refused(ks):
    with pytest.raises(ValueError, match=r"ks must be fractions in \(0, 1\]"):
        bottom_k_means(np.zeros(3), np.array([0, 3]), ks)
    with pytest.raises(ValueError, match="backend must be one of torch, triton"):
        bottom_k_means(np.zeros(3), np.array([0, 3]), ks, backend="numpy")


def test_bottom_k_counts_reproduce_python_int_of_float_product():
    lengths = np.arange(0, 500)
    for k in (0.1, 0.2, 0.29, 0.3, 0.7, 0.9):
        expected = [max(1, int(n * k)) for n in lengths]
        np.testing.assert_array_equal(bottom_k_counts(lengths, [k])[:, 0], expected)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(-50, 0, width=32), min_size=0, max_size=30), min_size=1, max_size=8),
    st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4),
)
def test_bottom_k_means_match_per_text_sort(texts, ks):
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    values = np.array([v for t in texts for v in t], dtype=np.float32)
    got = bottom_k_means(values, offsets, ks)
    for i, text in enumerate(texts):
        for j, k in enumerate(ks):
            if not text:
                assert math.isnan(got[i, j])
            else:
                expected = np.mean(np.sort(np.array(text, np.float64))[: max(1, int(len(text) * k))])
                assert got[i, j] == pytest.approx(expected, rel=1e-9, abs=1e-9)
