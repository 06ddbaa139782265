"""The reference-model ratio on hand-built TokenStats."""

import math

import pytest
from helpers import HAND_STATS, make_stats, method_scores

from mia_fast.methods.reference import REFERENCE_PASS, REFERENCE_RATIO


def test_ref_is_the_loss_under_the_reference_minus_the_loss_under_the_target():
    reference = make_stats([(1, -2.0, 0, 1)], [(1, -8.0, 0, 1)], [])
    ref = method_scores(HAND_STATS, [REFERENCE_RATIO], passes={REFERENCE_PASS: reference})[REFERENCE_RATIO]
    assert ref[0] == pytest.approx(2.0 - 1.625)
    assert ref[1] == pytest.approx(8.0 - 4.0) and math.isnan(ref[2])


def test_its_passes_are_the_plain_one_and_the_reference_models():
    from mia_fast.engines.passes import PLAIN, REFERENCE
    from mia_fast.methods import REGISTRY, MethodSettings

    assert tuple(REGISTRY[REFERENCE_RATIO].passes(MethodSettings())) == (PLAIN, REFERENCE_PASS)
    assert REFERENCE_PASS.model == REFERENCE
