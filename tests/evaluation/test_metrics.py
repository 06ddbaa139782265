"""The metrics against scikit-learn and by hand: AUROC and ROC with ties, TPR at low FPR only where the non-members
resolve it, paired seeded bootstrap CIs, the permutation control (exact against full enumeration, uniform under the
null), Holm's correction and the paired margin over the best baseline."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics


def labels_and_scores(draw_scores):
    return st.integers(4, 60).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 1), min_size=n, max_size=n).filter(lambda y: 0 < sum(y) < len(y)),
            st.lists(draw_scores, min_size=n, max_size=n),
        )
    )


@settings(max_examples=200, deadline=None)
@given(labels_and_scores(st.floats(-5, 5, allow_nan=False)))
def test_auroc_equals_sklearn_on_random_scores(data):
    y, s = map(np.array, data)
    assert abs(metrics.auroc(y, s) - roc_auc_score(y, s)) <= 1e-9


@settings(max_examples=200, deadline=None)
@given(labels_and_scores(st.integers(0, 3).map(float)))
def test_auroc_and_roc_curve_equal_sklearn_with_ties(data):
    y, s = map(np.array, data)
    assert abs(metrics.auroc(y, s) - roc_auc_score(y, s)) <= 1e-9
    ours, theirs = metrics.roc_curve(y, s), sk_roc_curve(y, s)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_roc_curve_equals_sklearn_on_large_random():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 5000)
    s = rng.normal(size=5000) + y * 0.5
    for a, b in zip(metrics.roc_curve(y, s), sk_roc_curve(y, s)):
        np.testing.assert_array_equal(a, b)
    assert abs(metrics.auroc(y, s) - roc_auc_score(y, s)) <= 1e-9


def test_tpr_at_fpr_takes_last_point_at_or_below_level():
    # Hand-built curve: fpr steps 0, .1, .1, .3, 1 with tpr 0, .2, .5, .6, 1
    fpr = np.array([0.0, 0.1, 0.1, 0.3, 1.0])
    tpr = np.array([0.0, 0.2, 0.5, 0.6, 1.0])
    assert metrics.tpr_at_fpr(fpr, tpr, 0.05) == 0.0
    assert metrics.tpr_at_fpr(fpr, tpr, 0.1) == 0.5
    assert metrics.tpr_at_fpr(fpr, tpr, 0.2) == 0.5
    assert metrics.tpr_at_fpr(fpr, tpr, 0.3) == 0.6
    assert metrics.fpr_at_tpr(fpr, tpr, 0.95) == 1.0


def test_tpr_at_fpr_sees_sklearn_dropped_points():
    # Equal steps along a diagonal: sklearn drops the middle point, so TPR@FPR<=0.5 reads the earlier one.
    y = np.array([1, 0, 1, 0])
    s = np.array([4, 3, 2, 1.0])
    fpr, tpr, _ = metrics.roc_curve(y, s)
    sk_fpr, sk_tpr, _ = sk_roc_curve(y, s)
    assert metrics.tpr_at_fpr(fpr, tpr, 0.5) == sk_tpr[np.where(sk_fpr <= 0.5)[0][-1]]


def test_perfect_separation():
    y = np.array([0, 0, 1, 1])
    result = metrics.evaluate(
        y, {"good": np.array([0.1, 0.2, 0.8, 0.9]), "bad": np.array([0.9, 0.8, 0.2, 0.1])}, resamples=100
    )
    assert result["good"].auroc == 1.0 and result["bad"].auroc == 0.0
    assert result["good"].tpr_at_fpr["0.1%"] is None  # 2 non-members cannot resolve an FPR of 0.1%
    assert metrics.tpr_at_fpr(*metrics.roc_curve(y, np.array([0.1, 0.2, 0.8, 0.9]))[:2], 0.001) == 1.0


def test_bootstrap_is_seeded_and_paired():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 200)
    a = rng.normal(size=200) + y
    first = metrics.bootstrap_auroc(y, {"a": a, "b": a.copy()}, resamples=300, seed=7)
    again = metrics.bootstrap_auroc(y, {"a": a}, resamples=300, seed=7)
    np.testing.assert_array_equal(first["a"], first["b"])  # same resamples for every method
    np.testing.assert_array_equal(first["a"], again["a"])
    low, high = metrics.confidence_interval(first["a"])
    assert low < metrics.auroc(y, a) < high


def test_bootstrap_matches_explicit_resampling():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 50)
    s = np.round(rng.normal(size=50), 1)  # ties on purpose
    draws = metrics.bootstrap_auroc(y, {"s": s}, resamples=20, seed=3)["s"]
    picks = np.random.default_rng(3).integers(0, 50, size=(20, 50))
    for draw, idx in zip(draws, picks):
        if 0 < y[idx].sum() < 50:
            assert abs(draw - roc_auc_score(y[idx], s[idx])) <= 1e-9


def test_nan_rows_are_excluded_from_every_method():
    y = np.array([0, 1, 0, 1, 1])
    result = metrics.evaluate(
        y, {"a": np.array([0.1, 0.9, np.nan, 0.7, 0.8]), "b": np.array([0.2, 0.3, 0.1, 0.4, 0.5])}, resamples=50
    )
    assert result["a"].n_excluded == result["b"].n_excluded == 1
    assert result["b"].n_nonmembers == 1


@pytest.mark.parametrize(
    "scores, message",
    [
        ([np.nan] * 5, "all 3 member rows were excluded as unscorable"),
        ([0.1, np.nan, 0.2, np.nan, np.nan], "all 3 member rows were excluded as unscorable"),
        ([np.nan, 0.9, np.nan, 0.7, 0.8], "all 2 non-member rows were excluded as unscorable"),
    ],
    ids=["every row", "every member", "every non-member"],
)
def test_a_class_whose_rows_were_all_unscorable_is_named_as_such(scores, message):
    with pytest.raises(MiaFastError, match=message):
        metrics.evaluate(np.array([0, 1, 0, 1, 1]), {"a": np.array(scores)}, resamples=10, permutations=10)


@pytest.mark.parametrize(
    "labels, message",
    [
        ([0, 1, 2], "found 2"),
        (["member", "nonmember"], "found 'member'"),
        ([1, 1, 1], "all members"),
        ([0, 0], "all non-members"),
    ],
)
def test_bad_labels_are_refused(labels, message):
    with pytest.raises(MiaFastError, match=message):
        metrics.check_labels(labels)


def test_a_confidence_interval_of_no_defined_resample_is_nan_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        low, high = metrics.confidence_interval(np.full(50, np.nan))
    assert np.isnan(low) and np.isnan(high)


def exact_permutation_p(labels: np.ndarray, scores: np.ndarray) -> float:
    """The share of every relabelling with as many members whose AUROC reaches the observed one."""
    observed = metrics.auroc(labels, scores)
    n, members = len(labels), int(labels.sum())
    reached = total = 0
    for chosen in itertools.combinations(range(n), members):
        relabelled = np.zeros(n, dtype=int)
        relabelled[list(chosen)] = 1
        reached += metrics.auroc(relabelled, scores) >= observed - 1e-12
        total += 1
    return reached / total


@pytest.mark.parametrize(
    "scores",
    [
        [0.9, 0.8, 0.7, 0.3, 0.2, 0.1, 0.05],  # perfectly separated: only the true labelling reaches it
        [0.9, 0.2, 0.7, 0.3, 0.8, 0.1, 0.5],
        [1.0, 1.0, 0.5, 1.0, 0.5, 0.5, 0.0],  # ties count one half, in both
    ],
)
def test_the_permutation_p_value_matches_full_enumeration(scores):
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    exact = exact_permutation_p(labels, np.asarray(scores))
    estimate = metrics.permutation_pvalues(labels, {"m": np.asarray(scores)}, permutations=40_000, seed=3)["m"]
    assert estimate == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 40_000) + 1e-4)


def test_permutation_p_values_are_seeded_paired_and_bounded():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(50), np.zeros(50)].astype(int)
    columns = {"separates": labels + 0.01 * rng.normal(size=100), "constant": np.ones(100)}
    first = metrics.permutation_pvalues(labels, columns, permutations=300, seed=1)
    assert first == metrics.permutation_pvalues(labels, columns, permutations=300, seed=1)
    assert first["separates"] == 1 / 301  # no shuffle reaches AUROC 1
    assert first["constant"] == 1.0  # every shuffle ties at 0.5
    evaluated = metrics.evaluate(labels, columns, resamples=50, permutations=300, seed=1)
    assert evaluated["separates"].significance.permutation_p == first["separates"]


def test_under_the_null_the_p_values_are_uniform():
    labels = np.r_[np.ones(20), np.zeros(20)].astype(int)
    rng = np.random.default_rng(5)
    pvalues = [
        metrics.permutation_pvalues(labels, {"noise": rng.normal(size=40)}, permutations=200, seed=s)["noise"]
        for s in range(200)
    ]
    assert 0.02 < np.mean(np.array(pvalues) < 0.1) < 0.2 and 0.4 < np.mean(pvalues) < 0.6


def test_holm_by_hand():
    # Sorted p: .001 <= .05/4, .011 <= .05/3, .03 > .05/2: stops there, so .03 and .04 stay although both < .05.
    assert metrics.holm_rejections({"a": 0.011, "b": 0.001, "c": 0.03, "d": 0.04}) == {"a", "b"}
    assert metrics.holm_rejections({"a": 0.2}) == set()


def test_tpr_is_reported_only_where_the_nonmembers_resolve_the_fpr():
    rng = np.random.default_rng(1)
    for nonmembers, shown in ((32, {"5%"}), (99, {"5%"}), (100, {"1%", "5%"}), (1000, {"0.1%", "1%", "5%"})):
        labels = np.r_[np.ones(20), np.zeros(nonmembers)].astype(int)
        result = metrics.evaluate(labels, {"m": labels + rng.normal(size=len(labels))}, resamples=20)["m"]
        assert {k for k, v in result.tpr_at_fpr.items() if v is not None} == shown
        missing = result.to_dict().get("tpr_at_fpr_missing", {})
        assert set(missing) == {"0.1%", "1%", "5%"} - shown
        if "1%" in missing:
            assert missing["1%"].startswith(f"needs >= 100 non-members; with {nonmembers} the smallest non-zero FPR")


def test_the_paired_margin_over_the_best_baseline():
    rng = np.random.default_rng(2)
    labels = np.r_[np.ones(100), np.zeros(100)].astype(int)
    columns = {
        "strong": 3 * labels + rng.normal(size=200),
        "weak": 0.3 * labels + rng.normal(size=200),
        "blind_a": 0.8 * labels + rng.normal(size=200),
        "blind_b": rng.normal(size=200),
    }
    results = metrics.evaluate(labels, columns, resamples=300, baselines=("blind_a", "blind_b"))
    assert (
        results["strong"].significance.over_baseline_ci[0] > 0 and results["weak"].significance.over_baseline_ci[1] < 0
    )
    assert (
        results["blind_a"].significance.over_baseline_ci is None
        and results["blind_b"].significance.over_baseline_ci is None
    )
    assert metrics.evaluate(labels, columns, resamples=20)["strong"].significance.over_baseline_ci is None
