"""The blind baselines' refit permutation test: its sequential p-value by hand, its false-alarm rate on random
labels and its power on a planted leak by simulation; the features read once change no score against the plain
matrices; telltales named only where they hold up on held-out folds."""

import numpy as np
import pytest
from scipy import sparse
from test_blind import WORDS, random_texts

from mia_fast.evaluation import blind, metrics
from mia_fast.evaluation.assessment import BlindSettings, assess


def _noise_baseline(features, labels, splits, seed):
    return np.random.default_rng(int(labels @ (1 << np.arange(len(labels)) % 60))).normal(size=len(labels))


@pytest.fixture
def noise_baselines(monkeypatch):
    monkeypatch.setattr(blind, "BASELINES", {"noise": _noise_baseline})


def test_the_sequential_p_value_by_hand(noise_baselines):
    features = blind.BlindFeatures.of(random_texts(20, 0))
    labels = np.r_[np.ones(10), np.zeros(10)].astype(int)
    # Every shuffle reaches an observed AUROC of 0: the tenth stops it, p = 10 / 10; the null still gets its draws.
    reached = blind.refit_permutation_tests(features, labels, {"noise": 0.0}, permutations=499)["noise"]
    assert (reached.p_value, reached.permutations) == (1.0, blind.STOP_AFTER)
    assert len(reached.null_aurocs) == blind.null_draws(499) == blind.NULL_DRAWS
    # None reaches AUROC 2: every shuffle drawn, p = 1 / (1 + 499).
    unreached = blind.refit_permutation_tests(features, labels, {"noise": 2.0}, permutations=499)["noise"]
    assert (unreached.p_value, unreached.permutations, len(unreached.null_aurocs)) == (1 / 500, 499, 499)
    # Otherwise STOP_AFTER / (the shuffle at which the STOP_AFTER-th reached it), or (1 + reached) / (1 + all).
    observed = 0.6
    test = blind.refit_permutation_tests(features, labels, {"noise": observed}, permutations=499)["noise"]
    reaching = np.flatnonzero(test.null_aurocs >= observed - 1e-12) + 1
    if len(reaching) >= blind.STOP_AFTER:
        assert test.p_value == blind.STOP_AFTER / reaching[blind.STOP_AFTER - 1]
    else:
        assert test.p_value == (len(reaching) + 1) / 500


def test_fewer_shuffles_on_larger_samples():
    assert blind.refit_permutations(200) == blind.refit_permutations(1000) == blind.MOST_PERMUTATIONS
    assert blind.refit_permutations(2000) == 250 and blind.refit_permutations(100_000) == blind.FEWEST_PERMUTATIONS
    assert blind.null_draws(blind.FEWEST_PERMUTATIONS) == 2 * blind.STOP_AFTER


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


def test_the_features_read_once_give_the_scores_of_the_plain_matrices():
    """Hashed columns no text holds are dropped, and of n-grams held by the same texts only the one the greedy
    selection would pick is kept: neither changes a score or a pick."""
    from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfTransformer
    from sklearn.linear_model import SGDClassifier
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline

    texts = random_texts(40, 30, length=20) + [f"{t} in 2026" for t in random_texts(40, 31, length=20)]
    labels = np.r_[np.zeros(40), np.ones(40)].astype(int)
    features = blind.BlindFeatures.of(texts)
    splits = blind.fold_splits(labels, 5, 0)
    hashed = HashingVectorizer(n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, 2)).transform(texts)
    plain = cross_val_predict(
        make_pipeline(TfidfTransformer(sublinear_tf=True), SGDClassifier(loss="log_loss", alpha=1e-5, random_state=0)),
        hashed,
        labels,
        cv=splits,
        method="decision_function",
    )
    assert np.array_equal(blind.BASELINES["blind_bow"](features, labels, splits, 0), plain)
    vectorizer = CountVectorizer(analyzer=blind._ngrams_of, binary=True, dtype=np.float32)
    matrix = vectorizer.fit_transform(texts).tocsr()
    names = vectorizer.get_feature_names_out()
    lengths = np.array([len(n) for n in names])
    assert features.ngrams.shape[1] < matrix.shape[1] / 2
    for train, held_out in splits:
        ours = blind.greedy_ngram_selection(features.ngrams[train], labels[train], features.ngram_lengths)
        theirs = blind.greedy_ngram_selection(matrix[train], labels[train], lengths)
        assert [features.ngram_names[c] for c in ours.columns] == [names[c] for c in theirs.columns]
        assert np.array_equal(
            blind._greedy_scores(ours, features.ngrams[held_out]), blind._greedy_scores(theirs, matrix[held_out])
        )


def test_a_telltale_is_named_only_where_it_holds_up_held_out():
    # Rows 0-9 are members, 10-19 non-members; rows 5-9 and 15-19 are held out. Both n-grams are held by members 0-4
    # in training; held out, 'aa' by the non-members 15-19 and 'bb' by the members 5-9.
    holds = {"aa": [0, 1, 2, 3, 4, 15, 16, 17, 18, 19], "bb": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}
    labels = np.r_[np.ones(10), np.zeros(10)].astype(int)
    matrix = sparse.csr_matrix(np.array([[r in holds[n] for n in holds] for r in range(20)], dtype=np.float32))
    features = blind.BlindFeatures(None, None, matrix, np.array(list(holds)), np.array([2, 2]))
    held_out = np.r_[5:10, 15:20]
    splits = [(np.setdiff1d(np.arange(20), held_out), held_out)]
    selection = blind.GreedySelection(np.array([0, 1]), np.array([0, 0]), 5)
    named = blind._checked_telltales(features, labels, splits, [selection], top=3)
    assert [t.ngram for t in named] == ["bb"]
    bb = named[0]
    assert (bb.members, bb.held_out_members, bb.nonmembers, bb.held_out_nonmembers, bb.folds) == (5, 5, 0, 5, 1)
    assert bb.p_value == pytest.approx(1 / 252)  # Fisher: all 5 held-out holders are members, 1 of C(10, 5) ways


def test_the_words_of_the_planted_leak_come_back_from_every_fold():
    members = [f"{t} in 2026" for t in random_texts(30, 0, WORDS)]
    telltales = blind.telltale_ngrams(members + random_texts(30, 1, WORDS), [1] * 30 + [0] * 30)
    assert telltales[0].ngram == " 2026" and telltales[0].folds == blind.DEFAULT_FOLDS
    assert (telltales[0].members, telltales[0].nonmembers) == (30, 0)
