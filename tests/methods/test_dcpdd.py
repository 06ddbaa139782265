"""DC-PDD on a hand-checked example: first occurrences, the frequency table's Laplace smoothing and the cap,
and the counts it refuses."""

import math

import numpy as np
import pytest
from helpers import HAND_STATS, method_scores

from mia_fast.errors import MiaFastError
from mia_fast.frequency.table import laplace_log_frequencies, load_counts
from mia_fast.methods import DcpddSettings, LogFrequencies


def test_dcpdd_hand_checked_example():
    # vocabulary of 8, corpus counts below: N = 20, |V| = 8 -> f(v) = (c + 1) / 28
    counts = np.array([0, 1, 2, 3, 4, 5, 3, 2], dtype=np.uint64)
    log_f = laplace_log_frequencies(counts, 8)
    np.testing.assert_allclose(np.exp(log_f), (counts + 1) / 28)
    settings_ = [DcpddSettings(a=0.5, frequencies=LogFrequencies(log_f))]
    scores = method_scores(HAND_STATS, ["dcpdd"], settings=settings_)["dcpdd"]
    # text 0: first occurrences of ids 5, 6, 7 (second 5 skipped)
    alphas = [
        min(math.exp(-1.0) * -math.log(6 / 28), 0.5),
        min(math.exp(-3.0) * -math.log(4 / 28), 0.5),
        min(math.exp(-2.0) * -math.log(3 / 28), 0.5),
    ]
    assert alphas[0] == 0.5 and alphas[1] < 0.5  # the cap binds on one token only
    assert scores[0] == pytest.approx(np.mean(alphas))
    assert scores[1] == pytest.approx(min(math.exp(-4.0) * -math.log(2 / 28), 0.5))
    assert math.isnan(scores[2])


def test_counts_loader_refuses_bad_vectors(tmp_path):
    with pytest.raises(MiaFastError, match="1-D"):
        load_counts(np.zeros((2, 2), np.int64))
    with pytest.raises(MiaFastError, match="non-negative integers"):
        load_counts(np.array([1.5, 2.0]))
    with pytest.raises(MiaFastError, match="non-negative integers"):
        load_counts(np.array([1, -2]))
    with pytest.raises(MiaFastError, match="could not read"):
        load_counts(tmp_path / "missing.npy")
    with pytest.raises(MiaFastError, match="cover 3 ids but the model's vocabulary has 4"):
        laplace_log_frequencies(np.ones(3, np.uint64), 4)
