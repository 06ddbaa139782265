"""Min-K% and Min-K%++ on hand-built TokenStats, and the bottom-k means they take (max(1, int(k·n)) values, as
the public code's int of the float product)."""

import math

import numpy as np
import pytest
from helpers import HAND_STATS, make_stats, method_scores
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.ops.bottom_k import bottom_k_counts, bottom_k_means


def test_mink_uses_max_one_floor_k_n():
    scores = method_scores(HAND_STATS, ["mink"], ks=(0.2, 0.5, 0.75, 1.0))
    # text 0 sorted: -3, -2, -1, -0.5; n=4 -> counts 1, 2, 3, 4
    assert scores["mink_0.2"][0] == pytest.approx(-3.0)
    assert scores["mink_0.5"][0] == pytest.approx(-2.5)
    assert scores["mink_0.75"][0] == pytest.approx(-2.0)
    assert scores["mink_1.0"][0] == pytest.approx(-1.625)
    # one token: floor(0.2 * 1) = 0 is raised to 1 (the public code would give NaN)
    assert scores["mink_0.2"][1] == pytest.approx(-4.0)
    assert math.isnan(scores["mink_0.2"][2])


def test_minkpp_standardises_by_mu_and_sigma():
    scores = method_scores(HAND_STATS, ["minkpp_0.5"])
    z = sorted([(-1 + 2) / 1, (-3 + 2) / 2, (-0.5 + 1) / 0.5, 0.0])
    assert scores["minkpp_0.5"][0] == pytest.approx(np.mean(z[:2]))


def test_minkpp_floors_zero_variance():
    stats = make_stats([(1, -1e-9, -1e-9, 0.0), (2, -0.1, -0.2, 0.01)])
    value = method_scores(stats, ["minkpp_1.0"])["minkpp_1.0"][0]
    assert np.isfinite(value)


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
