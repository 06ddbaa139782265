"""CAMIA: each feature on hand-built loss sequences, the copies found in the repeated pass, the p-values against
scipy, the orientation, and on a tiny model that a text's score depends neither on the batches nor on the texts
scored with it."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import scipy.stats

from mia_fast import CamiaSettings, ComputeConfig, Detector
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods
from mia_fast.methods.camia import (
    FEATURES,
    REPEATED,
    Repeated,
    above_previous_mean,
    approximate_entropies,
    camia_features,
    find_copies,
    lempel_ziv_complexity,
    percentile_ranks,
    sequence_features,
    slopes,
    token_diversity,
)
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.settings import MethodSettings
from mia_fast.scoring.method_runs import score


def test_repeated_text_is_the_text_and_five_copies_after_spaces():
    assert Repeated()("a b") == "a b a b a b a b a b a b"
    assert REPEATED.transform == Repeated()


def test_sequence_features_by_hand():
    x = np.array([-1.0, -2.0, -0.5, -3.0])
    diversity = np.array([0.5, 0.8, 0.8])
    got = sequence_features(x, diversity)
    # ends (-1, 200, 300): x[:-1] leaves out the last token; x[:200] and x[:300] are all of it
    np.testing.assert_allclose(got["loss"], [-3.5 / 3, -1.625, -1.625])
    np.testing.assert_allclose(got["ppl"], np.exp([3.5 / 3, 1.625, 1.625]))
    np.testing.assert_allclose(got["count_above"], [2 / 4, 3 / 4, 4 / 4])  # log p >= -1, -2, -3
    np.testing.assert_array_equal(got["count_mean"], [2, 2, 2])  # values above their mean
    np.testing.assert_allclose(got["calibrated_loss"], got["loss"] / diversity)
    np.testing.assert_allclose(got["calibrated_ppl"], got["ppl"] / diversity)
    assert got["token_diversity"] is diversity


def test_token_diversity_counts_the_unscored_first_id_as_its_own():
    # the model reads [first, 5, 5, 7, 9]: ids[:-1] has 3 of 4 distinct, ids[:200] 4 of 5
    np.testing.assert_allclose(token_diversity(np.array([5, 5, 7, 9])), [3 / 4, 4 / 5, 4 / 5])


def test_lempel_ziv_complexity_of_the_reference_example():
    # binned on [-5, 0] then in 2 levels: 1 0 0 1 1 1, parsed as 1 | 0 | 01 | 11: 4 phrases over 6 values
    assert lempel_ziv_complexity(np.array([0.0, -5.0, -5.0, 0.0, 0.0, 0.0]), 2) == pytest.approx(4 / 6)
    assert lempel_ziv_complexity(np.full(8, -1.0), 3) == pytest.approx(3 / 8)  # one level: 0 | 00 | 000, then repeats


def direct_approximate_entropy(x: np.ndarray, m: int, r: float) -> float:
    """Pincus's definition, a run at a time."""
    n, tolerance = len(x), r * np.std(x)
    if n <= m + 1:
        return 0.0

    def phi(k: int) -> float:
        runs = [x[i : i + k] for i in range(n - k + 1)]
        close = [np.mean([np.max(np.abs(a - b)) <= tolerance for b in runs]) for a in runs]
        return float(np.mean(np.log(close)))

    return abs(phi(m) - phi(m + 1))


def test_approximate_entropy_for_every_end_from_one_distance_matrix():
    x = np.random.default_rng(0).normal(size=70)
    got = approximate_entropies(x, (30, 50, 100), m=3, r=0.8)
    want = [direct_approximate_entropy(x[:end], 3, 0.8) for end in (30, 50, 100)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert approximate_entropies(x[:9], (600,)).tolist() == [0.0]  # at most m + 1 = 9 values
    regular = approximate_entropies(np.tile([-1.0, -3.0], 20), (40,), m=2)[0]
    assert regular < 1e-3 < 0.1 < approximate_entropies(x, (40,), m=2)[0]


def test_slope_and_share_above_the_previous_mean():
    np.testing.assert_allclose(slopes(2 * np.arange(10.0) - 7, (600, 5)), [2.0, 2.0])
    # t=1: -0.5 > -1; t=2: -2 < -0.75; t=3: -0.1 > -7/6. With end 3 only t = 1, 2 count.
    np.testing.assert_allclose(above_previous_mean(np.array([-1.0, -0.5, -2.0, -0.1]), (10**9, 3)), [2 / 3, 1 / 2])


def test_copies_are_found_by_the_text_ids_from_the_third_on():
    text = np.array([11, 12, 13, 14])  # scored ids; the model reads [10, 11, 12, 13, 14]
    copy = [20, 11, 12, 13, 14]  # " " + the text: its first word is another id
    repeated = np.array([11, 12, 13, 14, *copy * 5])
    starts, length = find_copies(text, repeated)
    assert starts.tolist() == [1, 6, 11] and length == 3


def test_a_copy_whose_first_word_splits_otherwise_is_sought_by_fewer_ids():
    text = np.array([11, 12, 13, 14])
    copy = [20, 21, 13, 14]  # the first word's ids differ up to the text's third id
    starts, length = find_copies(text, np.array([11, 12, 13, 14, *copy * 5]))
    assert starts.tolist() == [2, 6, 10] and length == 2
    assert find_copies(text, np.array([11, 12, 13, 14, *[20, 21, 22, 23] * 5])) is None


def test_percentile_ranks_are_scipys_percentileofscore():
    rng = np.random.default_rng(1)
    for _ in range(200):
        reference = rng.integers(0, 5, size=rng.integers(1, 12)).astype(float)
        values = rng.integers(-1, 6, size=6).astype(float)
        want = scipy.stats.percentileofscore(reference, values) / 100
        np.testing.assert_array_equal(percentile_ranks(values, reference), want)
    got = percentile_ranks(np.array([1.0, np.nan]), np.array([0.0, np.nan, 2.0]))
    assert got[0] == 0.5 and np.isnan(got[1])  # a NaN of the reference is left out, a NaN value stays NaN
    assert np.isnan(percentile_ranks(np.array([1.0]), np.array([np.nan]))).all()


def stats(*texts: tuple[list[int], list[float]]) -> TokenStats:
    return TokenStats.from_texts(
        [
            {"target_ids": np.array(ids), "logp": np.array(logp), "mu": np.zeros(len(ids)), "var": np.ones(len(ids))}
            for ids, logp in texts
        ]
    )


def hand_built(logps: list[np.ndarray], nonmembers: tuple[str, ...] = ()) -> ScoringInputs:
    """Texts of distinct ids whose copies in the repeated pass lose what the text loses, shrunk tenfold."""
    plain, repeated = [], []
    for i, x in enumerate(logps):
        ids = list(range(100 * i, 100 * i + len(x)))
        plain.append((ids, x))
        repeated.append((ids + ([10**6] + ids) * 5, np.concatenate([x, *[np.r_[-0.5, x / 10]] * 5])))
    settings = MethodSettings(CamiaSettings(nonmembers=nonmembers))
    return ScoringInputs(stats(*plain), {REPEATED: stats(*repeated)}, settings=settings)


def test_a_text_likelier_than_the_nonmembers_scores_higher():
    rng = np.random.default_rng(2)
    known = [-rng.gamma(2.0, 1.5, size=40) for _ in range(12)]
    likely, unlikely = [-rng.gamma(2.0, 0.5, size=40)], [-rng.gamma(2.0, 3.0, size=40)]
    names = tuple(f"non-member {i}" for i in range(12))
    inputs = hand_built(likely + unlikely, names)
    inputs = ScoringInputs(**{**inputs.__dict__, "calibration": {names: hand_built(known)}})
    got = score(inputs, resolve_methods(["camia"]))["camia"]
    assert -1 <= got[1] < got[0] <= 0
    features = camia_features(inputs)
    assert features.shape == (2, len(FEATURES)) == (2, 75) and np.isfinite(features).all()


def test_a_text_of_fewer_than_three_tokens_has_no_features():
    inputs = hand_built([np.array([-1.0, -2.0])])
    assert np.isnan(camia_features(inputs)).all()


def test_camia_needs_its_calibration_texts():
    inputs = hand_built([np.array([-1.0, -2.0, -0.5, -0.2])], ("a non-member",))
    with pytest.raises(MiaFastError, match="'camia' needs its calibration texts run through its passes"):
        score(inputs, resolve_methods(["camia"]))


def test_scored_texts_among_the_nonmembers_are_refused():
    with pytest.raises(MiaFastError, match="1 scored text.* also non-member reference texts"):
        CamiaSettings(nonmembers=("known", "both ")).check_texts(["both", "other"])


NONMEMBERS = tuple(f"known text number {i} about a quiet river and its fox" for i in range(6))
TEXTS = ["the fox runs by the river", "a quick brown fox jumps over the lazy dog twice", "x", "", "one two three"]


def test_a_score_depends_neither_on_the_batches_nor_on_the_other_texts(tiny_eos_only_model_dir):
    settings = [CamiaSettings(nonmembers=NONMEMBERS)]
    whole = Detector(str(tiny_eos_only_model_dir), settings).score(TEXTS, methods=["camia"])["camia"]
    assert np.isfinite(whole[[0, 1, 4]]).all() and np.isnan(whole[[2, 3]]).all()  # too short, empty
    small = Detector(str(tiny_eos_only_model_dir), settings, ComputeConfig(batch_tokens=16))
    np.testing.assert_array_equal(small.score(TEXTS, methods=["camia"])["camia"], whole)
    alone = [small.score([text], methods=["camia"])["camia"][0] for text in reversed(TEXTS)]
    np.testing.assert_array_equal(alone[::-1], whole)


def test_the_nonmembers_features_are_computed_once_for_the_passes_the_detector_keeps(monkeypatch):
    from mia_fast.methods import camia

    rng = np.random.default_rng(3)
    names = tuple(f"non-member {i}" for i in range(6))
    known = hand_built([-rng.gamma(2.0, 1.5, size=30) for _ in range(6)])
    blocks = [hand_built([-rng.gamma(2.0, 1.0, size=30) for _ in range(2)], names) for _ in range(3)]
    blocks = [ScoringInputs(**{**block.__dict__, "calibration": {names: known}}) for block in blocks]
    expected = [camia.combined_pvalues(camia_features(b), camia_features(known)) for b in blocks]
    computed = []
    monkeypatch.setattr(camia, "camia_features", lambda inputs: computed.append(inputs) or camia_features(inputs))
    for block, scores in zip(blocks, expected):
        np.testing.assert_array_equal(score(block, resolve_methods(["camia"]))["camia"], scores)
    assert sum(inputs is known for inputs in computed) == 1 and len(computed) == 4
    # Other results of the same texts' passes (another detector, another model) are computed again.
    other = hand_built([-rng.gamma(2.0, 1.5, size=30) for _ in range(6)])
    np.testing.assert_array_equal(camia.known_features(other), camia_features(other))
    assert computed[-1] is other
    # Results no longer held are forgotten.
    key = (id(other.stats), id(other.of(REPEATED)))
    assert key in camia._KNOWN_FEATURES
    del other
    computed.clear()
    gc.collect()
    assert key not in camia._KNOWN_FEATURES
