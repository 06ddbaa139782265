"""The model-free baselines' permutation tests, every shuffle of the labels refitted.

A baseline's out-of-fold scores were fitted on the labels, so shuffling the labels over
fixed scores is no null for them: a search over thousands of n-grams finds chance associations that are properties
of the whole sample, and so hold across folds (on random splits of 20 + 20 texts, that fixed-score p-value fell
below 0.01 several times in sixteen). :func:`refit_permutation_tests` repeats the whole out-of-fold procedure, the
fold split and the greedy selection inside each fold included, on each shuffle of the labels: a true null. A
baseline's shuffles stop once ``STOP_AFTER`` of them reach its observed AUROC (Besag and Clifford's sequential
p-value, valid wherever it stops), so a split at chance costs a few dozen refits; larger samples draw fewer
shuffles (:func:`refit_permutations`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind_features import BlindFeatures
from mia_fast.evaluation.blind_fits import BASELINES, DEFAULT_FOLDS, fold_splits

# Refit shuffles: MOST_PERMUTATIONS up to FULL_PERMUTATION_ROWS texts, fewer in proportion above, never below
# FEWEST_PERMUTATIONS (p down to 0.01, below Holm's first threshold over the three baselines, 0.05 / 3).
MOST_PERMUTATIONS = 499
FULL_PERMUTATION_ROWS = 1000
FEWEST_PERMUTATIONS = 99
STOP_AFTER = 10
NULL_DRAWS = 100


def null_draws(most: int) -> int:
    """The fewest shuffles drawn for the null's spread (the minimum detectable AUROC), past a test's stop where
    needed (its p-value stays the one at the stop): NULL_DRAWS at the full count of shuffles, fewer in proportion,
    at least twice STOP_AFTER."""
    return min(most, max(2 * STOP_AFTER, round(NULL_DRAWS * most / MOST_PERMUTATIONS)))


def refit_permutations(rows: int) -> int:
    """The most label shuffles the refit test draws per baseline for ``rows`` texts: MOST_PERMUTATIONS up to
    FULL_PERMUTATION_ROWS, then fewer in proportion (each refit costs about as much as the rows), never below
    FEWEST_PERMUTATIONS."""
    if rows <= FULL_PERMUTATION_ROWS:
        return MOST_PERMUTATIONS
    return max(FEWEST_PERMUTATIONS, round(MOST_PERMUTATIONS * FULL_PERMUTATION_ROWS / rows))


@dataclass(frozen=True)
class RefitTest:
    """A baseline's permutation test with every shuffle refitted: its p-value, the shuffles it rests on (fewer than
    ``most`` where STOP_AFTER of them met the observed AUROC first), and the AUROCs of every shuffle drawn (the null,
    at least :func:`null_draws` of them, for its spread)."""

    p_value: float
    permutations: int
    most: int
    null_aurocs: np.ndarray


def refit_permutation_tests(
    features: BlindFeatures,
    labels: np.ndarray,
    observed: Mapping[str, float],
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    permutations: int | None = None,
    on_permutation: Callable[[], None] | None = None,
) -> dict[str, RefitTest]:
    """One-sided permutation p-value of each baseline's ``observed`` AUROC, every shuffle of the labels refitted
    from its fold split on (:data:`BASELINES`): (1 + #{shuffles reaching it}) / (1 + shuffles), or STOP_AFTER / s
    where the s-th shuffle is the STOP_AFTER-th to reach it (Besag and Clifford 1991). The same seeded shuffles for
    every baseline; ``permutations`` (default :func:`refit_permutations`) caps each."""
    labels = np.asarray(labels, dtype=np.int64)
    most = refit_permutations(len(labels)) if permutations is None else permutations
    if most < 1:
        raise MiaFastError(f"the refit test needs at least 1 permutation, got {most}")
    import sklearn  # noqa: PLC0415 (sklearn: slow at start-up; only the blind baselines need it)

    rng = np.random.default_rng(seed)
    fewest = null_draws(most)
    nulls: dict[str, list[float]] = {column: [] for column in observed}
    reached = dict.fromkeys(observed, 0)
    stopped: dict[str, int] = {}
    for _ in range(most):
        active = [c for c in observed if c not in stopped or len(nulls[c]) < fewest]
        if not active:
            break
        shuffled = rng.permutation(labels)
        splits = fold_splits(shuffled, folds, seed)
        for column in active:
            # The features are the baselines' own, finite by construction: sklearn's checks of them, per fit, are
            # most of a small sample's cost.
            with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
                null = metrics.auroc(shuffled, BASELINES[column](features, shuffled, splits, seed))
            nulls[column].append(null)
            if column not in stopped:
                reached[column] += null >= observed[column] - 1e-12
                if reached[column] == STOP_AFTER:
                    stopped[column] = len(nulls[column])
        if on_permutation is not None:
            on_permutation()
    tests = {}
    for column, drawn in nulls.items():
        if column in stopped:
            count, p = stopped[column], STOP_AFTER / stopped[column]
        else:
            count, p = len(drawn), (reached[column] + 1) / (len(drawn) + 1)
        tests[column] = RefitTest(p, count, most, np.asarray(drawn))
    return tests
