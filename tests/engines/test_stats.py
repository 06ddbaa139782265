"""TokenStats (engines.stats), the hand-off between the model side and the methods: built from per-text arrays,
split by offsets, taken in any order, and saved and read back checked."""

import numpy as np
import pytest

from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError


def two_texts() -> TokenStats:
    """Text 0: ids 4, 5, 4; text 1: none; text 2: id 9, without max_logp."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": [4, 5, 4],
                "logp": [-1.0, -2.0, -3.0],
                "mu": [-0.5, -0.5, -1.0],
                "var": [1.0, 2.0, 3.0],
                "max_logp": [-0.1, -0.2, -0.3],
            },
            {"target_ids": [], "logp": [], "mu": [], "var": [], "max_logp": []},
            {"target_ids": [9], "logp": [-4.0], "mu": [-2.0], "var": [0.5]},
        ]
    )


def test_texts_are_stored_flat_and_split_by_offsets():
    stats = two_texts()
    assert len(stats) == 3
    assert stats.offsets.tolist() == [0, 3, 3, 4] and stats.lengths.tolist() == [3, 0, 1]
    assert stats.target_ids.dtype == np.int64 and stats.logp.dtype == np.float32
    assert stats.target_ids.tolist() == [4, 5, 4, 9]
    assert stats.segment_ids.tolist() == [0, 0, 0, 2]
    np.testing.assert_array_equal(stats.entropy, [0.5, 0.5, 1.0, 2.0])


def test_a_token_seen_before_in_its_text_is_no_first_occurrence():
    assert two_texts().first_occurrence.tolist() == [True, True, False, True]


def test_a_text_without_max_logp_holds_nan_there():
    max_logp = two_texts().max_logp
    np.testing.assert_array_equal(max_logp[:3], np.array([-0.1, -0.2, -0.3], np.float32))
    assert np.isnan(max_logp[3])


def test_mean_logp_is_per_text_and_nan_without_tokens():
    np.testing.assert_allclose(two_texts().mean_logp, [-2.0, np.nan, -4.0])


def test_no_texts_make_empty_stats():
    stats = TokenStats.from_texts([])
    assert len(stats) == 0 and stats.offsets.tolist() == [0] and stats.logp.shape == (0,)


def test_a_texts_arrays_are_its_slice():
    text = two_texts().text(2)
    assert text["target_ids"].tolist() == [9] and text["logp"].tolist() == [-4.0]
    assert text["first_occurrence"].tolist() == [True]
    assert two_texts().text(1)["logp"].shape == (0,)


def test_take_reorders_and_repeats_texts():
    taken = two_texts().take([2, 0, 1, 2])
    assert taken.lengths.tolist() == [1, 3, 0, 1]
    assert taken.target_ids.tolist() == [9, 4, 5, 4, 9]
    assert taken.logp.tolist() == [-4.0, -1.0, -2.0, -3.0, -4.0]
    assert taken.first_occurrence.tolist() == [True, True, True, False, True]


def test_top_logprobs_give_max_logp_exactly_from_the_likeliest():
    stats = TokenStats.from_top_logprobs(
        [
            {
                "target_ids": np.array([1, 2]),
                "logp": np.array([-0.5, -3.0], np.float32),
                "top": np.array([[-0.5, -1.5], [-0.2, -1.0]], np.float32),
                "target_in_top": np.array([True, False]),
            }
        ],
        vocab_size=10,
    )
    assert stats.max_logp.tolist() == [-0.5, pytest.approx(-0.2)]
    assert stats.logp.tolist() == [-0.5, -3.0] and np.isfinite(stats.mu).all()


def test_saved_stats_read_back_equal_and_a_changed_file_is_refused(tmp_path):
    stats = two_texts()
    path = stats.save(tmp_path / "stats")
    assert path == tmp_path / "stats.npz"
    loaded = TokenStats.load(path)
    for name in ("offsets", "target_ids", "logp", "mu", "var", "max_logp", "first_occurrence"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(stats, name), err_msg=name)
    arrays = dict(np.load(path))
    arrays["logp"] = arrays["logp"] + 1
    np.savez(tmp_path / "changed.npz", **arrays)
    with pytest.raises(MiaFastError, match="checksum mismatch"):
        TokenStats.load(tmp_path / "changed.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(MiaFastError, match="is not a TokenStats file written by mia-fast"):
        TokenStats.load(tmp_path / "text.npz")
    with pytest.raises(MiaFastError, match="no such file"):
        TokenStats.load(tmp_path / "missing.npz")
