"""Thresholds on hand-built validation scores: both rules, NaN rows, bad inputs, contamination rates."""

import json
import math

import numpy as np
import pytest

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.thresholds import Threshold, calibrate, contamination_rates, flag

LABELS = [1, 1, 1, 0, 0, 0]
SCORES = [0.9, 0.8, 0.4, 0.5, 0.3, 0.1]


def test_accuracy_rule_takes_the_highest_of_equally_accurate_thresholds():
    threshold = calibrate(LABELS, SCORES, "mink_0.2")
    # t = 0.8 and t = 0.4 both classify 5 of 6 right; the higher flags fewer texts.
    assert threshold.value == 0.8
    assert threshold.validation == {"accuracy": 5 / 6, "tpr": 2 / 3, "fpr": 0.0, "members": 3, "nonmembers": 3}
    np.testing.assert_array_equal(flag(SCORES, threshold), [True, True, False, False, False, False])


@pytest.mark.parametrize("target, value, tpr", [(0.0, 0.8, 2 / 3), (0.34, 0.4, 1.0), (0.99, 0.4, 1.0)])
def test_fpr_rule_takes_the_highest_tpr_within_the_target(target, value, tpr):
    """Among thresholds of equal TPR the highest wins: the same members found with fewer false alarms."""
    threshold = calibrate(LABELS, SCORES, "loss", rule="fpr", target_fpr=target)
    assert (threshold.value, threshold.validation["tpr"]) == (value, tpr)
    assert threshold.validation["fpr"] <= target


def test_nan_scores_are_left_out_and_never_flagged():
    threshold = calibrate([1, 0, 1, 0], [2.0, 1.0, float("nan"), float("nan")], "loss")
    assert threshold.validation["members"] == 1 and threshold.value == 2.0
    np.testing.assert_array_equal(flag([float("nan"), 3.0], threshold), [False, True])


def test_a_validation_set_without_members_or_nonmembers_is_refused():
    with pytest.raises(MiaFastError, match="has no members"):
        calibrate([0, 0, 0], [0.1, 0.2, 0.3], "loss")
    with pytest.raises(MiaFastError, match="has no non-members"):
        calibrate([1, 1, 0], [0.1, 0.2, float("nan")], "loss")
    with pytest.raises(MiaFastError, match="target FPR"):
        calibrate(LABELS, SCORES, "loss", rule="fpr", target_fpr=None)


def test_threshold_file_round_trip_and_refusals(tmp_path):
    threshold = calibrate(LABELS, SCORES, "minkpp_0.2", settings={"model": "m", "prepend_start": True})
    path = threshold.save(tmp_path / "t.json")
    assert Threshold.load(path) == threshold
    (tmp_path / "other.json").write_text(json.dumps({"method": "loss"}))
    with pytest.raises(MiaFastError, match="is not a mia-fast threshold v2 file"):
        Threshold.load(tmp_path / "other.json")
    with pytest.raises(MiaFastError, match="cannot read"):
        Threshold.load(tmp_path / "missing.json")


def test_contamination_rates_per_group_highest_first():
    groups = ["book A", "book A", "book A", "book B", "book B", "book C"]
    flags = np.array([True, True, False, False, True, False])
    scored = np.array([True, True, True, True, True, False])
    rates = contamination_rates(groups, flags, scored)
    assert [(r["group"], r["flagged"], r["scored"]) for r in rates] == [
        ("book A", 2, 3),
        ("book B", 1, 2),
        ("book C", 0, 0),
    ]
    assert rates[0]["rate"] == pytest.approx(2 / 3) and math.isnan(rates[2]["rate"])
