"""Each blind baseline's out-of-fold fit: the fold split, the date classifier against scikit-learn's exact logistic
regression, the word classifier's TF-IDF against scikit-learn's, and the greedy n-gram selection by hand."""

import numpy as np
import pytest
from scipy import sparse

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.blind_fits import (
    _greedy_scores,
    _standardise,
    _tf_idf,
    cross_validation_folds,
    fold_splits,
    greedy_ngram_selection,
    logistic_regression,
)


def test_the_folds_are_stratified_seeded_and_at_most_one_per_text_of_the_smaller_class():
    labels = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    assert cross_validation_folds(labels) == 3 and cross_validation_folds(labels, folds=2) == 2
    splits = fold_splits(labels, 5, seed=7)
    assert len(splits) == 3 and [s[1].tolist() for s in splits] == [s[1].tolist() for s in fold_splits(labels, 5, 7)]
    held_out = np.concatenate([s[1] for s in splits])
    assert sorted(held_out.tolist()) == list(range(10))  # every text held out exactly once
    assert all(labels[s[1]].sum() == 1 for s in splits)  # one member in each fold
    assert all(np.intersect1d(train, test).size == 0 for train, test in splits)
    with pytest.raises(MiaFastError, match="found 1 of one class"):
        cross_validation_folds([1, 0, 0, 0])


def test_greedy_selection_by_hand():
    # n-grams: x (members 0, 1; non-member 0), y (member 2; none), z (members 1, 2; non-members 0, 1), w (non-member 1)
    holds = {"x": [0, 1, 3], "y": [2], "z": [1, 2, 3, 4], "w": [4]}
    labels = np.array([1, 1, 1, 0, 0])  # rows 3 and 4 are the non-members
    matrix = sparse.csr_matrix(
        np.array([[row in holds[n] for n in ("w", "x", "y", "z")] for row in range(5)], dtype=np.float32)
    )
    lengths = np.ones(4, dtype=int)
    selection = greedy_ngram_selection(matrix, labels, lengths)
    # Ratios: x 2/2, y 1/1, z 2/3: x and y tie at 1 and x comes first; then y flags member 2 and no member is left.
    assert selection.columns.tolist() == [1, 2] and selection.nonmembers_flagged.tolist() == [1, 1]
    scores = _greedy_scores(selection, matrix)
    # A row flagged at step s scores -(non-members flagged by then + s/3)/2; a row no n-gram flags, -(2 + 2/3)/2.
    assert scores.tolist() == pytest.approx([-0.5, -0.5, -(1 + 1 / 3) / 2, -0.5, -(2 + 2 / 3) / 2])
    longer = greedy_ngram_selection(matrix, labels, np.array([1, 1, 2, 1]))
    assert longer.columns[0] == 2  # a tie goes to the longer n-gram


@pytest.mark.parametrize("seed", range(4))
def test_the_date_classifier_is_scikit_learns_logistic_regression_solved_to_the_end(seed):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(seed)
    x = np.c_[rng.normal(size=(40, 3)) * [1, 10, 0.1], np.full(40, 0.24), rng.integers(0, 2, 40)]
    y = (x[:, 0] + rng.normal(size=40) > 0).astype(float)
    if seed == 3:
        y = (x[:, 0] > 0).astype(float)  # separable: only the penalty bounds the weights
    train, held_out = np.arange(30), np.arange(30, 40)
    standardised = _standardise(x, train)
    weights = logistic_regression(standardised[train], y[train])
    ours = standardised[held_out] @ weights[:-1] + weights[-1]
    exact = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cg", tol=1e-13, max_iter=10_000))
    theirs = exact.fit(x[train], y[train]).decision_function(x[held_out])
    assert np.abs(ours - theirs).max() < 1e-8
    assert np.all(standardised[:, 3] == 0)  # a constant column is centred on its value exactly


def test_the_word_classifiers_tf_idf_is_scikit_learns():
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfTransformer

    rng = np.random.default_rng(0)
    dense = rng.integers(1, 5, (12, 30)) * (rng.random((12, 30)) < 0.3)
    dense[4] = 0  # a text without a word
    counts = sparse.csr_matrix(dense.astype(np.float64))
    before = counts.copy()
    train = np.array([0, 2, 3, 4, 5, 7, 8, 11])
    theirs = TfidfTransformer(sublinear_tf=True).fit(counts[train]).transform(counts)
    assert abs(_tf_idf(counts, train) - theirs).max() < 1e-15
    assert (counts != before).nnz == 0  # the counts are left as they were
