"""The minimum detectable AUROC against simulation: at the figure a verdict states, about 80% of 2,000 simulated draws
of the run's sizes are detected by the report's own test (within 4 points); the figure falls with n as 1/sqrt(n);
and where no AUROC could be detected, there is no figure."""

import math

import numpy as np
import pytest
from scipy.stats import norm, ttest_ind

from mia_fast.evaluation import metrics, power

DRAWS = 2000


def binormal_shift(auroc: float) -> float:
    """The shift between two unit normals whose AUROC is ``auroc``: Phi(shift / sqrt 2) = auroc."""
    return math.sqrt(2) * norm.ppf(auroc)


def wide_null(n: int) -> np.ndarray:
    """AUROCs of a drawn null 1.3 times as wide as the rank-sum null of n + n texts, centred a little below 0.5."""
    return np.random.default_rng(n).normal(0.49, 1.3 * power.rank_sum_null_sd(n, n), 100_000)


def labels_of(members: int, nonmembers: int) -> np.ndarray:
    return np.r_[np.ones(members), np.zeros(nonmembers)].astype(int)


@pytest.mark.parametrize(
    "members, nonmembers, columns",
    [(100, 100, 1), (20, 20, 3), (32, 32, 12), (30, 200, 1)],  # 3: the blind baselines; 12: mink at 10 k and more
)
def test_at_the_figure_the_permutation_control_detects_about_80_percent(members, nonmembers, columns):
    alpha = metrics.SIGNIFICANCE / columns  # Holm's first step: what one real effect among null columns must pass
    permutations = 999
    figure = power.min_detectable_auroc(members, nonmembers, alpha, smallest_p=1 / (permutations + 1))
    labels = labels_of(members, nonmembers)
    rng = np.random.default_rng(0)
    detected = 0
    for draw in range(DRAWS):
        scores = rng.normal(size=len(labels)) + binormal_shift(figure) * labels
        p = metrics.permutation_pvalues(labels, {"method": scores}, permutations=permutations, seed=draw)["method"]
        detected += p <= alpha
    assert detected / DRAWS == pytest.approx(power.POWER, abs=0.04)


@pytest.mark.parametrize("members, nonmembers, baseline", [(100, 100, 0.6), (50, 50, 0.55)])
def test_at_the_figure_a_margin_over_a_baseline_shows_about_80_percent(members, nonmembers, baseline):
    """The above-the-best-blind-baseline verdict: above chance and the paired CI of the difference above 0."""
    chance = power.min_detectable_auroc(members, nonmembers, metrics.SIGNIFICANCE, smallest_p=1 / 201)
    figure = max(chance, power.min_detectable_margin_auroc(baseline, members, nonmembers))
    labels = labels_of(members, nonmembers)
    rng = np.random.default_rng(1)
    detected = 0
    for draw in range(DRAWS):
        columns = {
            "method": rng.normal(size=len(labels)) + binormal_shift(figure) * labels,
            "blind": rng.normal(size=len(labels)) + binormal_shift(baseline) * labels,
        }
        result = metrics.evaluate(labels, columns, resamples=200, seed=draw, permutations=200, baselines=("blind",))
        significance = result["method"].significance
        detected += significance.permutation_p <= metrics.SIGNIFICANCE and significance.over_baseline_ci[0] > 0
    assert detected / DRAWS == pytest.approx(power.POWER, abs=0.04)


@pytest.mark.parametrize("first, second", [(50, 50), (12, 40)])
def test_at_the_figure_the_t_test_of_dataset_inference_rejects_about_80_percent(first, second):
    figure = power.min_detectable_shift_auroc(first, second, metrics.SIGNIFICANCE)
    rng = np.random.default_rng(2)
    suspect = rng.normal(size=(DRAWS, first)) + binormal_shift(figure)
    validation = rng.normal(size=(DRAWS, second))
    p = ttest_ind(suspect, validation, axis=1, equal_var=False, alternative="greater").pvalue
    assert np.mean(p < metrics.SIGNIFICANCE) == pytest.approx(power.POWER, abs=0.04)


@pytest.mark.parametrize(
    "figure",
    [
        lambda n: power.min_detectable_auroc(n, n, 0.05),
        lambda n: power.min_detectable_auroc(n, n, 0.05 / 3, null=wide_null(n)),
        lambda n: power.min_detectable_shift_auroc(n, n, 0.05),
    ],
)
def test_the_figure_falls_with_n_as_one_over_root_n(figure):
    excess = [figure(n) - 0.5 for n in (100, 400, 1600, 6400)]
    assert all(later / earlier == pytest.approx(0.5, abs=0.02) for earlier, later in zip(excess, excess[1:]))
    assert excess[0] == pytest.approx(8 * excess[-1], rel=0.05)  # sqrt(6400 / 100) = 8


def test_a_wider_null_or_a_stricter_level_needs_a_larger_auroc():
    plain = power.min_detectable_auroc(100, 100, 0.05)
    assert power.min_detectable_auroc(100, 100, 0.05 / 3) > plain
    assert power.min_detectable_auroc(100, 100, 0.05, null=wide_null(100)) > plain
    assert 0.59 < plain < 0.61  # 100 + 100 texts: a method at 0.58 is called at chance more often than not


def test_a_null_with_mass_at_a_perfect_separation_sees_less_or_nothing():
    """On 6 + 6 texts a refitted classifier separates about 2.5% of the shuffles perfectly: past that tail, a
    perfectly separating leak gives p = 0.025 at best, which fails 0.05 / 3, so there is no figure."""
    rng = np.random.default_rng(3)
    spread = rng.normal(0.5, power.rank_sum_null_sd(6, 6), 1000).clip(0, 0.97)
    with_atom = np.r_[spread[:975], np.ones(25)]
    assert power.min_detectable_auroc(6, 6, 0.05 / 3, null=with_atom) is None
    assert power.min_detectable_auroc(6, 6, 0.05, null=with_atom) is not None  # 2.5% is within 5%
    assert power.min_detectable_auroc(6, 6, 0.05 / 3, null=np.full(50, 0.5)) is None  # a null that never moves
    # A null tighter than the rank-sum one (a column whose scores mostly tie) claims no keener test.
    tight = np.random.default_rng(4).normal(0.5, 0.2 * power.rank_sum_null_sd(32, 32), 1000)
    assert power.min_detectable_auroc(32, 32, 0.05 / 3, null=tight) == power.min_detectable_auroc(32, 32, 0.05 / 3)


def test_no_figure_where_nothing_could_be_detected():
    # 3 + 3 texts: 20 labellings, so no permutation p-value falls below 1/20, above 0.05 / 3.
    assert power.min_detectable_auroc(3, 3, 0.05 / 3, smallest_p=1 / 20) is None
    # 99 shuffles cannot give p below 0.01, above 0.05 / 12.
    assert power.min_detectable_auroc(500, 500, 0.05 / 12, smallest_p=1 / 100) is None
    # A margin over a baseline at AUROC 1 cannot show.
    assert power.min_detectable_margin_auroc(1.0, 100, 100) is None
    assert power.min_detectable_shift_auroc(1, 30, 0.05) is None


def test_hanley_mcneil_by_hand():
    # A = 0.5, m = n = 10: Q1 = 1/3, Q2 = 1/3; (0.25 + 9 (1/3 - 1/4) * 2) / 100 = 0.0175.
    assert power.hanley_mcneil_se(0.5, 10, 10) == pytest.approx(math.sqrt(0.0175))
    assert power.hanley_mcneil_se(1.0, 10, 10) == 0.0
    assert power.rank_sum_null_sd(10, 10) == pytest.approx(math.sqrt(21 / 1200))
