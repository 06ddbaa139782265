"""The likelihood baselines, loss and zlib, on hand-built TokenStats."""

import math
import zlib

import pytest
from helpers import HAND_STATS, method_scores


def test_loss_is_negated_mean_nll():
    loss = method_scores(HAND_STATS, ["loss"])["loss"]
    assert loss[0] == pytest.approx((-1 - 3 - 0.5 - 2) / 4)
    assert loss[1] == pytest.approx(-4.0)
    assert math.isnan(loss[2])


def test_zlib_divides_by_compressed_utf8_length():
    texts = ["héllo wörld", "x", ""]
    score = method_scores(HAND_STATS, ["zlib"], texts=texts)["zlib"]
    assert score[0] == pytest.approx(-1.625 / len(zlib.compress(texts[0].encode("utf-8"))))
