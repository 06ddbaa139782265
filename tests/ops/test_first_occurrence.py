"""DC-PDD's reduction by hand: the first occurrence of each id within its text, and the capped mean of
p(x) * -ln f(x) over a text's first occurrences (NaN for an empty text)."""

import math

import numpy as np
import pytest

from mia_fast.ops.first_occurrence import capped_first_occurrence_mean, first_occurrence_mask


def test_first_occurrences_by_hand():
    ids = np.array([5, 3, 5, 3, 7, 5, 5, 3])
    assert first_occurrence_mask(ids, np.array([0, 5, 5, 8])).tolist() == [1, 1, 0, 0, 1, 1, 0, 1]
    assert first_occurrence_mask(np.zeros(0, dtype=np.int64), np.array([0, 0])).tolist() == []


def test_the_capped_mean_by_hand():
    ids = np.array([5, 3, 5, 7, 5, 5])
    offsets = np.array([0, 4, 4, 6])
    logp = np.log(np.array([0.5, 0.5, 0.9, 1.0, 0.25, 0.8], dtype=np.float32))
    log_f = np.full(8, -1.0)
    log_f[[3, 5, 7]] = -4.0, -2.0, -1.0
    first = first_occurrence_mask(ids, offsets)
    means = capped_first_occurrence_mean(ids, logp, first, offsets, log_f, cap=1.5)
    # Text 0: ids 5, 3, 7 first: min(0.5 * 2, 1.5), min(0.5 * 4, 1.5), min(1 * 1, 1.5); text 2: 0.25 * 2 (the 5 again
    # is no first occurrence).
    np.testing.assert_allclose(means, [(1.0 + 1.5 + 1.0) / 3, math.nan, 0.5], rtol=1e-7)
    with pytest.raises(ValueError, match="backend must be one of torch, triton"):
        capped_first_occurrence_mean(ids, logp, first, offsets, log_f, cap=1.5, backend="cpu")
