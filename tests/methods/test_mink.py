"""Min-K% and Min-K%++ on hand-built TokenStats: max(1, int(k·n)) values, as the public code's int of the float
product (the bottom-k means themselves: tests/ops/test_bottom_k.py)."""

import math

import numpy as np
import pytest
from helpers import HAND_STATS, make_stats, method_scores


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
