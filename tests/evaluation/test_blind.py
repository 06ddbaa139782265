"""The model-free baselines as a whole: out-of-fold scores that separate a leaky split without any model and stay at
chance on an i.i.d. one, seeded, refused clearly on too few of a class; telltales named only where they hold up held
out; the baselines Holm's procedure calls leaking."""

import numpy as np
import pytest
from scipy import sparse

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import blind, blind_features, blind_fits, metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS, blind_scores, leaking_baselines

WORDS = (
    "river stone cloud lamp field market garden letter window bridge harbour summer winter engine paper music".split()
)


def random_texts(n: int, seed: int, words=WORDS, length: int = 12) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=length)) for _ in range(n)]


def test_a_leaky_split_is_separated_without_any_model_and_an_iid_split_is_not():
    members = [f"{t} in {1800 + i % 90}" for i, t in enumerate(random_texts(40, 0, WORDS[:8]))]
    nonmembers = [f"{t} in {2024 + i % 2}" for i, t in enumerate(random_texts(40, 1, WORDS[8:]))]
    labels = np.r_[np.ones(40), np.zeros(40)].astype(int)
    leaky = blind_scores(members + nonmembers, labels)
    assert all(metrics.auroc(labels, leaky[name]) > 0.95 for name in BLIND_COLUMNS)
    # Unique random texts with random labels: a classifier scored on texts it was trained on would
    # still reach AUROC near 1; out of fold, it stays near chance.
    texts = random_texts(80, 2, WORDS)
    shuffled = np.random.default_rng(3).permutation(labels)
    for scores in blind_scores(texts, shuffled).values():
        assert abs(metrics.auroc(shuffled, scores) - 0.5) < 0.2


def test_blind_scores_are_seeded():
    texts, labels = random_texts(30, 4), [0, 1] * 15
    first, second = blind_scores(texts, labels, seed=1), blind_scores(texts, labels, seed=1)
    assert all(np.array_equal(first[n], second[n]) for n in BLIND_COLUMNS)


def test_too_few_of_a_class_is_refused_clearly():
    with pytest.raises(MiaFastError, match="at least 2 members and 2 non-members"):
        blind_scores(random_texts(6, 5), [1, 0, 0, 0, 0, 0])
    with pytest.raises(MiaFastError, match="3 texts but 2 labels"):
        blind_scores(random_texts(3, 5), [1, 0])


def test_a_telltale_is_named_only_where_it_holds_up_held_out():
    # Rows 0-9 are members, 10-19 non-members; rows 5-9 and 15-19 are held out. Both n-grams are held by members 0-4
    # in training; held out, 'aa' by the non-members 15-19 and 'bb' by the members 5-9.
    holds = {"aa": [0, 1, 2, 3, 4, 15, 16, 17, 18, 19], "bb": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]}
    labels = np.r_[np.ones(10), np.zeros(10)].astype(int)
    matrix = sparse.csr_matrix(np.array([[r in holds[n] for n in holds] for r in range(20)], dtype=np.float32))
    features = blind_features.BlindFeatures(None, None, matrix, np.array(list(holds)), np.array([2, 2]))
    held_out = np.r_[5:10, 15:20]
    splits = [(np.setdiff1d(np.arange(20), held_out), held_out)]
    selection = blind_fits.GreedySelection(np.array([0, 1]), np.array([0, 0]), 5)
    named = blind._checked_telltales(features, labels, splits, [selection], top=3)
    assert [t.ngram for t in named] == ["bb"]
    bb = named[0]
    assert (bb.members, bb.held_out_members, bb.nonmembers, bb.held_out_nonmembers, bb.folds) == (5, 5, 0, 5, 1)
    assert bb.p_value == pytest.approx(1 / 252)  # Fisher: all 5 held-out holders are members, 1 of C(10, 5) ways


def test_the_words_of_the_planted_leak_come_back_from_every_fold():
    members = [f"{t} in 2026" for t in random_texts(30, 0, WORDS)]
    telltales = blind.telltale_ngrams(members + random_texts(30, 1, WORDS), [1] * 30 + [0] * 30)
    assert telltales[0].ngram == " 2026" and telltales[0].folds == blind_fits.DEFAULT_FOLDS
    assert (telltales[0].members, telltales[0].nonmembers) == (30, 0)


def test_leaking_baselines_are_the_blind_columns_holm_rejects():
    def result(p: float) -> metrics.MethodMetrics:
        return metrics.MethodMetrics(0.7, (0.6, 0.8), {}, 1.0, 10, 10, 0, metrics.Significance(p))

    # Over the three baselines: .001 <= .05/3 and .02 <= .05/2, then .04 <= .05/1; the method's p = 0 is not a baseline.
    results = {"blind_bow": result(0.02), "blind_dates": result(0.001), "blind_ngrams": result(0.04), "loss": result(0)}
    assert leaking_baselines(results) == set(BLIND_COLUMNS)
    results["blind_ngrams"] = result(0.3)  # .3 > .05: rejected no more, the two before it still are
    assert leaking_baselines(results) == {"blind_bow", "blind_dates"}
    assert leaking_baselines({"loss": result(0.0)}) == set()
