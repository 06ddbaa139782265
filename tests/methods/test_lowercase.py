"""The lowercase ratio on hand-built TokenStats."""

import math

import pytest
from helpers import HAND_STATS, make_stats, method_scores

from mia_fast.methods.lowercase import LOWERCASE


def test_lowercase_is_the_loss_of_the_lowercased_text_over_the_texts():
    lowered = make_stats([(1, -2.0, 0, 1)], [(1, -8.0, 0, 1)], [])
    lower = method_scores(HAND_STATS, ["lowercase"], passes={LOWERCASE: lowered})["lowercase"]
    assert lower[0] == pytest.approx(2.0 / 1.625)
    assert lower[1] == pytest.approx(8.0 / 4.0) and math.isnan(lower[2])


def test_the_lowercased_text_is_the_texts_lower_case():
    assert LOWERCASE.transform("ÉTÉ in PARIS") == "été in paris"
