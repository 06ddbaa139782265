"""The blind baselines' refit permutation test: its sequential p-value by hand, fewer shuffles on larger samples, its
false-alarm rate on random labels and its power on a planted leak by simulation."""

import numpy as np
import pytest

from evaluation.test_blind import random_texts
from mia_fast.evaluation import blind, blind_features, blind_refit, metrics
from mia_fast.evaluation.assessment import BlindSettings, assess


def _noise_baseline(features, labels, splits, seed):
    return np.random.default_rng(int(labels @ (1 << np.arange(len(labels)) % 60))).normal(size=len(labels))


@pytest.fixture
def noise_baselines(monkeypatch):
    monkeypatch.setattr(blind_refit, "BASELINES", {"noise": _noise_baseline})


def test_the_sequential_p_value_by_hand(noise_baselines):
    features = blind_features.BlindFeatures.of(random_texts(20, 0))
    labels = np.r_[np.ones(10), np.zeros(10)].astype(int)
    # Every shuffle reaches an observed AUROC of 0: the tenth stops it, p = 10 / 10; the null still gets its draws.
    reached = blind_refit.refit_permutation_tests(features, labels, {"noise": 0.0}, permutations=499)["noise"]
    assert (reached.p_value, reached.permutations) == (1.0, blind_refit.STOP_AFTER)
    assert len(reached.null_aurocs) == blind_refit.null_draws(499) == blind_refit.NULL_DRAWS
    # None reaches AUROC 2: every shuffle drawn, p = 1 / (1 + 499).
    unreached = blind_refit.refit_permutation_tests(features, labels, {"noise": 2.0}, permutations=499)["noise"]
    assert (unreached.p_value, unreached.permutations, len(unreached.null_aurocs)) == (1 / 500, 499, 499)
    # Otherwise STOP_AFTER / (the shuffle at which the STOP_AFTER-th reached it), or (1 + reached) / (1 + all).
    observed = 0.6
    test = blind_refit.refit_permutation_tests(features, labels, {"noise": observed}, permutations=499)["noise"]
    reaching = np.flatnonzero(test.null_aurocs >= observed - 1e-12) + 1
    if len(reaching) >= blind_refit.STOP_AFTER:
        assert test.p_value == blind_refit.STOP_AFTER / reaching[blind_refit.STOP_AFTER - 1]
    else:
        assert test.p_value == (len(reaching) + 1) / 500


def test_fewer_shuffles_on_larger_samples():
    assert blind_refit.refit_permutations(200) == blind_refit.refit_permutations(1000) == blind_refit.MOST_PERMUTATIONS
    assert (
        blind_refit.refit_permutations(2000) == 250
        and blind_refit.refit_permutations(100_000) == blind_refit.FEWEST_PERMUTATIONS
    )
    assert blind_refit.null_draws(blind_refit.FEWEST_PERMUTATIONS) == 2 * blind_refit.STOP_AFTER


def test_on_random_labels_a_leak_is_called_in_at_most_about_5_percent_of_splits():
    """The false-alarm rate under a true null: random texts, random labels, 6 + 6, 100 splits. Holm over the three
    baselines holds the family-wise rate at 5%, so more than 11 of 100 (P < 0.005 at 5%) fails."""
    pool = random_texts(400, 20, length=16)
    alarms = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        texts = [pool[i] for i in rng.choice(len(pool), 12, replace=False)]
        labels = rng.permutation(np.r_[np.ones(6), np.zeros(6)].astype(int))
        found = blind.blind_baselines(texts, labels, seed=seed, permutations=99)
        alarms += bool(metrics.holm_rejections({n: t.p_value for n, t in found.tests.items()}))
    assert alarms <= 11


def test_a_planted_leak_is_found_at_every_size_its_figure_allows():
    """Power on a planted effect: ' 2026' ends every member, which the n-gram and date baselines separate
    perfectly, above the minimum detectable AUROC already at 6 + 6 texts."""
    for size in (6, 12):
        for seed in range(3):
            texts = random_texts(2 * size, 100 + seed, length=16)
            labels = np.random.default_rng(seed).permutation(np.r_[np.ones(size), np.zeros(size)].astype(int))
            texts = [t + ", written in 2026" if label else t for t, label in zip(texts, labels)]
            assessed = assess(texts, labels, {"loss": np.zeros(2 * size)}, resamples=50, blind=BlindSettings(True, 99))
            verdict = assessed.verdicts[0]
            assert verdict.min_detectable_auroc < 1.0 and verdict.warning
            assert "blind_ngrams" in verdict.details["leaking"]
