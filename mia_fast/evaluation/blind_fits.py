"""Each model-free baseline's out-of-fold scores: the stratified, seeded fold split, and the three classifiers fitted
on a fold's training rows and scored on its held-out ones (:data:`BASELINES`). Every text is scored by a classifier
that never saw it, so the scores are evaluated like any method's, on the same rows and bootstrap resamples:

- ``blind_bow``: logistic regression (trained by SGD: seconds on 10k texts where an exact solver takes
  minutes) on TF-IDF word 1-2-grams, hashed so that nothing is fitted on the held-out fold (the IDF
  weights are fitted per fold);
- ``blind_dates``: logistic regression (solved by Newton's method: exact, where the default solver stops at a
  tolerance, and quicker on five features) on the years and dates a text mentions (the latest and the
  earliest year from 1000 to 2099, how many years and month-name dates it holds);
- ``blind_ngrams``: the greedy selection of Das et al. (``ethz-spylab/Blind-MIA``,
  ``greedy_selection_basic``): on the training folds, repeatedly pick the character 1-5-gram with the
  most not-yet-flagged members per not-yet-flagged non-member plus one, and flag every text holding it.
  A held-out text scores by the step that first flags it: minus the training non-members flagged up
  to that step (plus a fraction for the step), over the training non-members, so its ROC is the public
  code's curve of steps and scores of different folds share one scale (about the training FPR at which
  it is flagged). Two deliberate deviations: a tie goes to the longest n-gram, then the alphabetically
  first (the public code takes the alphabetically first, which names a planted "2026" as " 2"), and
  n-grams are read from a text's first 2,000 characters, which bounds memory on long documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.blind_features import BlindFeatures

DEFAULT_FOLDS = 5
Splits = list[tuple[np.ndarray, np.ndarray]]
_NONE = np.zeros(0, dtype=np.int64)


def cross_validation_folds(labels: Sequence[int], folds: int = DEFAULT_FOLDS) -> int:
    """The folds the blind baselines will use (at most one per text of the smaller class); refuses fewer than 2 of
    a class."""
    labels = np.asarray(labels, dtype=np.int64)
    smaller = int(min(labels.sum(), len(labels) - labels.sum()))
    if smaller < 2:
        raise MiaFastError(
            "blind baselines need at least 2 members and 2 non-members to cross-validate; "
            f"found {smaller} of one class (turn them off with --no-blind)"
        )
    return min(folds, smaller)


def fold_splits(labels: np.ndarray, folds: int, seed: int) -> Splits:
    """(training rows, held-out rows) of each fold: stratified, shuffled with ``seed``."""
    from sklearn.model_selection import StratifiedKFold  # noqa: PLC0415 (sklearn: slow at start-up; only the blind baselines need it)

    splitter = StratifiedKFold(n_splits=cross_validation_folds(labels, folds), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(len(labels)), labels))


def _tf_idf(counts, train: np.ndarray):
    """The l2-normed sublinear TF-IDF of every row of ``counts`` (CSR), the IDF fitted on the ``train`` rows:
    scikit-learn's ``TfidfTransformer(sublinear_tf=True)`` (smoothed IDF), without its per-call checks, which cost
    most of a fold's fit on a small sample."""
    documents = np.bincount(counts[train].indices, minlength=counts.shape[1])
    idf = np.log((len(train) + 1) / (documents + 1.0)) + 1.0
    weighted = counts.astype(np.float64)
    weighted.data = (np.log(weighted.data) + 1.0) * idf[weighted.indices]
    rows = np.repeat(np.arange(weighted.shape[0]), np.diff(weighted.indptr))
    norms = np.sqrt(np.bincount(rows, weights=weighted.data**2, minlength=weighted.shape[0]))
    weighted.data /= np.where(norms > 0, norms, 1.0)[rows]
    return weighted


def bow_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    from sklearn.linear_model import SGDClassifier  # noqa: PLC0415 (sklearn: slow at start-up; only the blind baselines need it)

    scores = np.empty(len(labels))
    for train, held_out in splits:
        weighted = _tf_idf(features.words, train)
        classifier = SGDClassifier(loss="log_loss", alpha=1e-5, random_state=seed)
        scores[held_out] = classifier.fit(weighted[train], labels[train]).decision_function(weighted[held_out])
    return scores


def logistic_regression(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The weights (intercept last) of logistic regression with an l2 penalty of 1/2 on the coefficients, the
    intercept unpenalised (scikit-learn's default objective), solved by Newton's method, each step halved until the
    objective falls, to convergence: exact where scikit-learn's solvers stop at a tolerance, and on a few features a
    fraction of a millisecond."""
    design = np.c_[x, np.ones(len(x))]
    penalty = np.r_[np.ones(x.shape[1]), 0.0]
    weights = np.zeros(design.shape[1])

    def objective(w: np.ndarray) -> float:
        margins = design @ w
        return float(np.logaddexp(0.0, margins).sum() - y @ margins + 0.5 * penalty @ (w * w))

    current = objective(weights)
    for _ in range(100):
        probabilities = 0.5 * (1.0 + np.tanh(0.5 * (design @ weights)))
        gradient = design.T @ (probabilities - y) + penalty * weights
        curvature = (design * (probabilities * (1.0 - probabilities))[:, None]).T @ design + np.diag(penalty)
        step = np.linalg.lstsq(curvature, gradient, rcond=None)[0]
        if gradient @ step < 1e-10:
            # Within the quadratic convergence: this step leaves an error far below what rounding resolves.
            return weights - step
        for _ in range(60):
            candidate = objective(weights - step)
            if candidate <= current:
                break
            step = step / 2
        else:
            return weights
        weights, current = weights - step, candidate
    return weights


def _standardise(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``x`` centred and scaled by its ``train`` rows' mean and standard deviation; a column constant there
    centred on its value, unscaled (scikit-learn's ``StandardScaler``)."""
    fitted = x[train]
    constant = fitted.max(axis=0) == fitted.min(axis=0)
    mean = np.where(constant, fitted[0], fitted.mean(axis=0))
    scale = np.where(constant, 1.0, fitted.std(axis=0))
    return (x - mean) / scale


def date_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    scores = np.empty(len(labels))
    for train, held_out in splits:
        standardised = _standardise(features.dates, train)
        weights = logistic_regression(standardised[train], labels[train].astype(np.float64))
        scores[held_out] = standardised[held_out] @ weights[:-1] + weights[-1]
    return scores


@dataclass(frozen=True)
class GreedySelection:
    """The n-grams picked (as columns), in order, and the training non-members flagged once each is added."""

    columns: np.ndarray
    nonmembers_flagged: np.ndarray
    nonmembers: int


def greedy_ngram_selection(matrix, labels: np.ndarray, lengths: np.ndarray) -> GreedySelection:
    """Das et al.'s greedy selection over the rows of a binary [texts, n-grams] matrix: until no n-gram flags
    another member, pick the one with the most unflagged members per (unflagged non-members + 1)."""
    held_by_members = np.asarray(matrix[labels == 1].sum(axis=0)).ravel()
    columns = np.flatnonzero(held_by_members > 0)  # no other n-gram is ever picked
    rows = {1: matrix[labels == 1][:, columns], 0: matrix[labels == 0][:, columns]}
    by_ngram = {label: rows[label].tocsc() for label in (1, 0)}
    counts = {label: np.asarray(rows[label].sum(axis=0)).ravel() for label in (1, 0)}
    unflagged = {label: np.ones(rows[label].shape[0], dtype=bool) for label in (1, 0)}
    lengths = lengths[columns]
    place = np.arange(len(columns))  # where each column of ``rows`` sits in ``columns`` now; -1 once dropped
    picked, flagged = [], []
    while (counts[1] > 0).any():
        alive = np.flatnonzero(counts[1] > 0)
        if len(alive) * 2 < len(columns):
            # Most n-grams flag no member any more, and never will again: dropping them makes every later step cheaper.
            moved = np.full(len(columns), -1)
            moved[alive] = np.arange(len(alive))
            place = np.where(place >= 0, moved[np.maximum(place, 0)], -1)
            columns, lengths = columns[alive], lengths[alive]
            by_ngram = {label: by_ngram[label][:, alive] for label in (1, 0)}
            counts = {label: counts[label][alive] for label in (1, 0)}
        ratio = np.where(counts[1] > 0, counts[1] / (counts[0] + 1), -1.0)
        tied = np.flatnonzero(ratio == ratio.max())
        column = int(tied[np.argmax(lengths[tied])])  # the longest, then the alphabetically first
        for label in (1, 0):
            holding = by_ngram[label].indices[by_ngram[label].indptr[column] : by_ngram[label].indptr[column + 1]]
            newly = holding[unflagged[label][holding]]
            unflagged[label][newly] = False
            csr = rows[label]
            held = place[np.concatenate([csr.indices[csr.indptr[r] : csr.indptr[r + 1]] for r in newly] or [_NONE])]
            counts[label] -= np.bincount(held[held >= 0], minlength=len(columns)).astype(counts[label].dtype)
        picked.append(columns[column])
        flagged.append(int((~unflagged[0]).sum()))
    return GreedySelection(np.asarray(picked, dtype=np.int64), np.asarray(flagged), rows[0].shape[0])


def _greedy_scores(selection: GreedySelection, matrix) -> np.ndarray:
    """Each row's score: minus (the training non-members flagged by the step that first flags it, plus the step's
    fraction of all steps) over the training non-members; below every step for a row no n-gram flags."""
    steps = len(selection.columns)
    holds = matrix[:, selection.columns].tocsr()  # column j: the n-gram picked at step j
    first = np.full(matrix.shape[0], steps)
    flagged_rows = np.diff(holds.indptr) > 0
    if flagged_rows.any():
        first[flagged_rows] = np.minimum.reduceat(holds.indices, holds.indptr[:-1][flagged_rows])
    flagged = np.r_[selection.nonmembers_flagged, selection.nonmembers].astype(np.float64)
    return -(flagged[first] + first / (steps + 1)) / max(selection.nonmembers, 1)


def ngram_selections(features: BlindFeatures, labels: np.ndarray, splits: Splits) -> list[GreedySelection]:
    return [
        greedy_ngram_selection(features.ngrams[train], labels[train], features.ngram_lengths) for train, _ in splits
    ]


def selection_scores(features: BlindFeatures, splits: Splits, selections: Sequence[GreedySelection]) -> np.ndarray:
    scores = np.empty(features.ngrams.shape[0])
    for (_, held_out), selection in zip(splits, selections):
        scores[held_out] = _greedy_scores(selection, features.ngrams[held_out])
    return scores


def ngram_scores(features: BlindFeatures, labels: np.ndarray, splits: Splits, seed: int) -> np.ndarray:
    return selection_scores(features, splits, ngram_selections(features, labels, splits))


# Each baseline's out-of-fold scores from the features, the labels, the fold split and the seed.
BASELINES: dict[str, Callable[[BlindFeatures, np.ndarray, Splits, int], np.ndarray]] = {
    "blind_bow": bow_scores,
    "blind_dates": date_scores,
    "blind_ngrams": ngram_scores,
}
