"""Gap-K% on hand-built TokenStats: the formula, the public code's edge rules, and that a text's score depends on
nothing but its own tokens."""

import numpy as np
import pytest
from helpers import check_scores_alone, token_stats
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import GapkSettings, MethodSettings, ScoringInputs, TokenStats, resolve_methods, score_stats
from mia_fast.ops.segments import segment_moving_average


def scores(stats: TokenStats, methods: list[str], *settings) -> dict[str, np.ndarray]:
    return score_stats(ScoringInputs(stats=stats, settings=MethodSettings(*settings)), resolve_methods(methods))


def test_gapk_is_the_lowest_k_mean_of_the_smoothed_normalised_gap():
    logp = [-1.0, -4.0, -2.0, -0.5, -3.0]
    max_logp = [-0.5, -1.0, -2.0, -0.5, -1.0]
    var = [4.0, 1.0, 0.25, 1.0, 0.0]  # the last under the floor: sigma = 1e-4
    gaps = (np.array(logp) - max_logp) / np.sqrt(np.maximum(var, 1e-8))  # -0.25, -3, 0, 0, -2e4
    smoothed = np.convolve(gaps, np.ones(3) / 3, "valid")
    got = scores(token_stats({"logp": logp, "max_logp": max_logp, "var": var}), ["gapk_0.4", "gapk_1.0"])
    assert got["gapk_0.4"][0] == pytest.approx(np.sort(smoothed)[0], rel=1e-6)  # max(1, int(3 * 0.4)) = 1
    assert got["gapk_1.0"][0] == pytest.approx(smoothed.mean(), rel=1e-6)


def test_gapk_leaves_a_text_shorter_than_the_window_unsmoothed_and_an_empty_one_nan():
    got = scores(token_stats({"logp": [-2.0, -1.0]}, {"logp": []}), ["gapk_1.0"], GapkSettings(window=3))["gapk_1.0"]
    assert got[0] == pytest.approx(-1.5) and np.isnan(got[1])
    wide = scores(token_stats({"logp": [-2.0, -1.0, -6.0]}), ["gapk_0.1"], GapkSettings(window=1))["gapk_0.1"]
    assert wide[0] == pytest.approx(-6.0)  # window 1: the gaps themselves


def test_gapk_window_must_be_a_positive_whole_number():
    with pytest.raises(Exception, match="window"):
        GapkSettings(window=0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(-50, 50, allow_nan=False), max_size=12), min_size=1, max_size=6),
    st.integers(1, 5),
)
def test_moving_average_equals_numpy_convolve_text_by_text(texts, window):
    values = np.array([v for t in texts for v in t], dtype=np.float64)
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    smoothed, new_offsets = segment_moving_average(values, offsets, window)
    for i, text in enumerate(texts):
        expected = np.convolve(text, np.ones(window) / window, "valid") if len(text) >= window else np.array(text)
        np.testing.assert_allclose(smoothed[new_offsets[i] : new_offsets[i + 1]], expected, rtol=1e-12, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=2, max_size=6), st.integers(0, 2**31 - 1))
def test_a_texts_score_does_not_depend_on_the_texts_scored_with_it(lengths, seed):
    check_scores_alone(["gapk"], lengths, seed)
