"""What the blind baselines read from the texts: date features by hand, the n-grams kept (one of those held by the
same texts, the one the greedy selection would pick), and the features read once giving the scores of the plain
matrices."""

import numpy as np
import pytest

from evaluation.test_blind import random_texts
from mia_fast.evaluation import blind_features, blind_fits
from mia_fast.evaluation.blind_features import BlindFeatures, date_features


def test_date_features_by_hand():
    features = date_features(
        [
            "In 1999 and again in 2021, on March 3rd, the bridge opened.",
            "page 12345, pi is 3.1415 and 1,999 apples",
            "2024-05-01 and 5 May",
        ]
    )
    assert features[0] == pytest.approx([1, 0.21, -0.01, np.log1p(2), np.log1p(1)])
    assert features[1] == pytest.approx([0, 0, 0, 0, 0])  # not years: a longer number, a decimal, a thousands separator
    assert features[2] == pytest.approx([1, 0.24, 0.24, np.log1p(1), np.log1p(2)])


def test_of_ngrams_held_by_the_same_texts_only_the_longest_then_first_is_kept():
    features = BlindFeatures.of(["abab", "ab", "ba"])
    held = {str(n): tuple(features.ngrams[:, c].toarray().ravel()) for c, n in enumerate(features.ngram_names)}
    # Held by all three: "a" and "b" (one length: the first kept); by text 0 alone: "aba", "bab", "abab" (the longest).
    assert held["ab"] == (1, 1, 0) and held["ba"] == (1, 0, 1) and held["a"] == (1, 1, 1)
    assert "b" not in held and "aba" not in held and held["abab"] == (1, 0, 0)
    assert features.ngram_lengths.tolist() == [len(n) for n in features.ngram_names]
    assert features.dates.shape == (3, 5) and features.words.shape[0] == 3


def test_the_features_read_once_give_the_scores_of_the_plain_matrices():
    """Hashed columns no text holds are dropped, and of n-grams held by the same texts only the one the greedy
    selection would pick is kept: neither changes a score or a pick."""
    from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfTransformer
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline

    texts = random_texts(40, 30, length=20) + [f"{t} in 2026" for t in random_texts(40, 31, length=20)]
    labels = np.r_[np.zeros(40), np.ones(40)].astype(int)
    features = blind_features.BlindFeatures.of(texts)
    splits = blind_fits.fold_splits(labels, 5, 0)
    hashed = HashingVectorizer(n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, 2)).transform(texts)
    plain = cross_val_predict(
        make_pipeline(TfidfTransformer(sublinear_tf=True), SGDClassifier(loss="log_loss", alpha=1e-5, random_state=0)),
        hashed,
        labels,
        cv=splits,
        method="decision_function",
    )
    assert np.array_equal(blind_fits.BASELINES["blind_bow"](features, labels, splits, 0), plain)
    vectorizer = CountVectorizer(analyzer=blind_features._ngrams_of, binary=True, dtype=np.float32)
    matrix = vectorizer.fit_transform(texts).tocsr()
    names = vectorizer.get_feature_names_out()
    lengths = np.array([len(n) for n in names])
    assert features.ngrams.shape[1] < matrix.shape[1] / 2
    for train, held_out in splits:
        ours = blind_fits.greedy_ngram_selection(features.ngrams[train], labels[train], features.ngram_lengths)
        theirs = blind_fits.greedy_ngram_selection(matrix[train], labels[train], lengths)
        assert [features.ngram_names[c] for c in ours.columns] == [names[c] for c in theirs.columns]
        assert np.array_equal(
            blind_fits._greedy_scores(ours, features.ngrams[held_out]),
            blind_fits._greedy_scores(theirs, matrix[held_out]),
        )
