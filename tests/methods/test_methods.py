import math
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import methods
from mia_fast.errors import MiaFastError
from mia_fast.frequency.table import laplace_log_frequencies, load_counts
from mia_fast.methods import DcpddSettings, LogFrequencies, MethodSettings, ScoringInputs, resolve_methods
from mia_fast.methods.lowercase import LOWERCASE
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.ops.bottom_k import bottom_k_counts, bottom_k_means
from mia_fast.ops.first_occurrence import first_occurrence_mask
from mia_fast.pipeline.stats import TokenStats


def make_stats(*texts: list[tuple[int, float, float, float]]) -> TokenStats:
    """TokenStats from per-text lists of (target id, logp, mu, var)."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.array([t[0] for t in rows], dtype=np.int64),
                "logp": np.array([t[1] for t in rows], dtype=np.float32),
                "mu": np.array([t[2] for t in rows], dtype=np.float32),
                "var": np.array([t[3] for t in rows], dtype=np.float32),
            }
            for rows in texts
        ]
    )


STATS = make_stats(
    [(5, -1.0, -2.0, 1.0), (6, -3.0, -2.0, 4.0), (5, -0.5, -1.0, 0.25), (7, -2.0, -2.0, 1.0)],
    [(1, -4.0, -3.0, 1.0)],
    [],
)


def run(names, ks=(0.5,), **inputs):
    return methods.score(ScoringInputs(stats=STATS, **inputs), resolve_methods(names, ks))


def test_loss_is_negated_mean_nll():
    loss = run(["loss"])["loss"]
    assert loss[0] == pytest.approx((-1 - 3 - 0.5 - 2) / 4)
    assert loss[1] == pytest.approx(-4.0)
    assert math.isnan(loss[2])


def test_zlib_divides_by_compressed_utf8_length():
    texts = ["héllo wörld", "x", ""]
    score = run(["zlib"], texts=texts)["zlib"]
    assert score[0] == pytest.approx(-1.625 / len(zlib.compress(texts[0].encode("utf-8"))))


def test_mink_uses_max_one_floor_k_n():
    scores = run(["mink"], ks=(0.2, 0.5, 0.75, 1.0))
    # text 0 sorted: -3, -2, -1, -0.5; n=4 -> counts 1, 2, 3, 4
    assert scores["mink_0.2"][0] == pytest.approx(-3.0)
    assert scores["mink_0.5"][0] == pytest.approx(-2.5)
    assert scores["mink_0.75"][0] == pytest.approx(-2.0)
    assert scores["mink_1.0"][0] == pytest.approx(-1.625)
    # one token: floor(0.2 * 1) = 0 is raised to 1 (the public code would give NaN)
    assert scores["mink_0.2"][1] == pytest.approx(-4.0)
    assert math.isnan(scores["mink_0.2"][2])


def test_minkpp_standardises_by_mu_and_sigma():
    scores = run(["minkpp_0.5"])
    z = sorted([(-1 + 2) / 1, (-3 + 2) / 2, (-0.5 + 1) / 0.5, 0.0])
    assert scores["minkpp_0.5"][0] == pytest.approx(np.mean(z[:2]))


def test_minkpp_floors_zero_variance():
    stats = make_stats([(1, -1e-9, -1e-9, 0.0), (2, -0.1, -0.2, 0.01)])
    value = methods.score(ScoringInputs(stats=stats), resolve_methods(["minkpp_1.0"]))["minkpp_1.0"][0]
    assert np.isfinite(value)


def test_bottom_k_counts_reproduce_python_int_of_float_product():
    lengths = np.arange(0, 500)
    for k in (0.1, 0.2, 0.29, 0.3, 0.7, 0.9):
        expected = [max(1, int(n * k)) for n in lengths]
        np.testing.assert_array_equal(bottom_k_counts(lengths, [k])[:, 0], expected)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.floats(-50, 0, width=32), min_size=0, max_size=30), min_size=1, max_size=8),
    st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4),
)
def test_bottom_k_means_match_per_text_sort(texts, ks):
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    values = np.array([v for t in texts for v in t], dtype=np.float32)
    got = bottom_k_means(values, offsets, ks)
    for i, text in enumerate(texts):
        for j, k in enumerate(ks):
            if not text:
                assert math.isnan(got[i, j])
            else:
                expected = np.mean(np.sort(np.array(text, np.float64))[: max(1, int(len(text) * k))])
                assert got[i, j] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_first_occurrence_mask_is_per_text():
    ids = np.array([3, 4, 3, 4, 3, 9, 3], dtype=np.int64)
    offsets = np.array([0, 4, 4, 7])
    np.testing.assert_array_equal(first_occurrence_mask(ids, offsets), [1, 1, 0, 0, 1, 1, 0])


def test_dcpdd_hand_checked_example():
    # vocabulary of 8, corpus counts below: N = 20, |V| = 8 -> f(v) = (c + 1) / 28
    counts = np.array([0, 1, 2, 3, 4, 5, 3, 2], dtype=np.uint64)
    log_f = laplace_log_frequencies(counts, 8)
    np.testing.assert_allclose(np.exp(log_f), (counts + 1) / 28)
    settings_ = MethodSettings(DcpddSettings(a=0.5, frequencies=LogFrequencies(log_f)))
    scores = run(["dcpdd"], settings=settings_)["dcpdd"]
    # text 0: first occurrences of ids 5, 6, 7 (second 5 skipped)
    alphas = [
        min(math.exp(-1.0) * -math.log(6 / 28), 0.5),
        min(math.exp(-3.0) * -math.log(4 / 28), 0.5),
        min(math.exp(-2.0) * -math.log(3 / 28), 0.5),
    ]
    assert alphas[0] == 0.5 and alphas[1] < 0.5  # the cap binds on one token only
    assert scores[0] == pytest.approx(np.mean(alphas))
    assert scores[1] == pytest.approx(min(math.exp(-4.0) * -math.log(2 / 28), 0.5))
    assert math.isnan(scores[2])


def test_lowercase_and_ref_ratios():
    other = make_stats([(1, -2.0, 0, 1)], [(1, -8.0, 0, 1)], [])
    lower = run(["lowercase"], passes={LOWERCASE: other})["lowercase"]
    assert lower[0] == pytest.approx(2.0 / 1.625)
    ref = run(["ref"], passes={REFERENCE_PASS: other})["ref"]
    assert ref[1] == pytest.approx(8.0 - 4.0)


def test_resolve_methods_names_and_errors():
    requests = resolve_methods(["loss", "mink", "minkpp_0.25", "minkpp_1"], ks=(0.1, 1.0))
    assert [c for r in requests for c in r.columns] == ["loss", "mink_0.1", "mink_1.0", "minkpp_0.25", "minkpp_1.0"]
    with pytest.raises(MiaFastError, match="unknown method 'minz'"):
        resolve_methods(["minz"])
    with pytest.raises(MiaFastError, match="k must be a fraction"):
        resolve_methods(["mink"], ks=(1.5,))
    with pytest.raises(MiaFastError, match="bad k"):
        resolve_methods(["mink_x"])
    with pytest.raises(MiaFastError, match="no method"):
        resolve_methods([" "])


def test_missing_need_is_an_error():
    # score() now names how to supply the missing setting (its declared supply text), as check_available does
    with pytest.raises(MiaFastError, match="needs a token frequency table"):
        run(["dcpdd"])


def test_counts_loader_refuses_bad_vectors(tmp_path):
    with pytest.raises(MiaFastError, match="1-D"):
        load_counts(np.zeros((2, 2), np.int64))
    with pytest.raises(MiaFastError, match="non-negative integers"):
        load_counts(np.array([1.5, 2.0]))
    with pytest.raises(MiaFastError, match="non-negative integers"):
        load_counts(np.array([1, -2]))
    with pytest.raises(MiaFastError, match="could not read"):
        load_counts(tmp_path / "missing.npy")
    with pytest.raises(MiaFastError, match="cover 3 ids but the model's vocabulary has 4"):
        laplace_log_frequencies(np.ones(3, np.uint64), 4)


def test_token_stats_round_trip(tmp_path):
    STATS.save(tmp_path / "stats.npz")
    loaded = TokenStats.load(tmp_path / "stats.npz")
    for name in ("offsets", "target_ids", "logp", "mu", "var", "first_occurrence"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(STATS, name))
    np.testing.assert_array_equal(loaded.entropy, -STATS.mu)
