"""Ragged per-text arrays by hand: each position's text, each text's mean (NaN for an empty one) and its moving
averages (a text shorter than the window kept as it is)."""

import numpy as np

from mia_fast.ops.segments import segment_ids, segment_mean, segment_moving_average


def test_segment_ids_by_hand():
    assert segment_ids(np.array([0, 2, 2, 5])).tolist() == [0, 0, 2, 2, 2]
    assert segment_ids(np.array([0])).tolist() == []


def test_segment_mean_by_hand():
    values = np.array([1.0, 3.0, 2.0, 4.0, 6.0, 99.0], dtype=np.float32)  # the last value lies past every text
    means = segment_mean(values, np.array([0, 2, 2, 5]))
    assert means.dtype == np.float64
    np.testing.assert_array_equal(means, [2.0, np.nan, 4.0])
    np.testing.assert_array_equal(segment_mean(np.zeros(0), np.array([0, 0, 0])), [np.nan, np.nan])


def test_segment_mean_keeps_every_texts_digits_beside_a_huge_one():
    means = segment_mean(np.array([1e20, -1e20, 0.1, 0.2]), np.array([0, 2, 4]))
    np.testing.assert_array_equal(means, [0.0, (0.1 + 0.2) / 2])


def test_segment_moving_average_by_hand():
    values = np.array([1, 2, 3, 4, 10, 5, 7])
    smoothed, offsets = segment_moving_average(values, np.array([0, 4, 4, 5, 7]), window=2)
    np.testing.assert_array_equal(smoothed, [1.5, 2.5, 3.5, 10.0, 6.0])  # the empty text and the short one as they are
    assert offsets.tolist() == [0, 3, 3, 4, 5] and offsets.dtype == np.int64
    same, kept = segment_moving_average(values, np.array([0, 4, 7]), window=1)
    np.testing.assert_array_equal(same, values)
    assert kept.tolist() == [0, 4, 7]
    whole, one = segment_moving_average(np.array([1.0, 2.0, 6.0]), np.array([0, 3]), window=3)
    assert whole.tolist() == [3.0] and one.tolist() == [0, 1]
