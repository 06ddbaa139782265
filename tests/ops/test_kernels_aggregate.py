"""Aggregation kernels (bottom-k means and the DC-PDD capped mean) against the numpy reference of
the ops layer (interpreter on CPU): counts exactly, values to 1e-6."""

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import kernels
from mia_fast.methods import DEFAULT_KS
from mia_fast.ops.bottom_k import bottom_k_counts
from mia_fast.ops.bottom_k import bottom_k_means as reference_bottom_k_means
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean, first_occurrence_mask

pytestmark = pytest.mark.lower_bounds

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Lengths around the kernels' block of 1024 positions, plus empty and single-token texts.
LENGTHS = [0, 1, 2, 7, 1023, 1024, 1025, 0, 3001, 5, 1]


def offsets_of(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def on_device(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array).to(DEVICE)


def bottom_k_means(values: torch.Tensor, offsets: torch.Tensor, ks) -> torch.Tensor:
    """The kernel, given the counts max(1, floor(k n)) as the ops layer computes them."""
    counts = bottom_k_counts(np.diff(offsets.cpu().numpy()), ks)
    return kernels.bottom_k_means(values, offsets, torch.from_numpy(counts).to(values.device))


def ragged_values(lengths, seed: int) -> np.ndarray:
    """Log-prob-like values with many exact ties, signed zeros and a few huge magnitudes."""
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    values = -rng.exponential(3.0, n).astype(np.float32)
    values[rng.random(n) < 0.3] = -1.5  # ties
    values[rng.random(n) < 0.05] = -0.0
    values[rng.random(n) < 0.05] = 0.0
    values[rng.random(n) < 0.01] = -1e30
    values[rng.random(n) < 0.2] *= -1  # positive values too, as z-scores have
    return values


def test_bottom_k_selects_exactly_the_reference_count():
    """Each text is a shuffled 0..n-1, so the mean of the c lowest is (c - 1) / 2: it reveals c."""
    rng = np.random.default_rng(0)
    lengths = [1, 3, 10, 29, 30, 31, 97, 100, 1030]
    values = np.concatenate([rng.permutation(n).astype(np.float32) for n in lengths])
    means = bottom_k_means(on_device(values), on_device(offsets_of(lengths)), DEFAULT_KS).cpu().numpy()
    np.testing.assert_array_equal(2 * means + 1, bottom_k_counts(np.array(lengths), DEFAULT_KS))


def test_bottom_k_means_match_reference_on_odd_lengths_and_ties():
    values, offsets = ragged_values(LENGTHS, seed=1), offsets_of(LENGTHS)
    ks = [0.05, 0.1, 0.2, 0.33, 0.5, 0.9, 1.0]
    got = bottom_k_means(on_device(values), on_device(offsets), ks).cpu().numpy()
    expected = reference_bottom_k_means(values, offsets, ks)
    assert got.dtype == np.float64 and got.shape == (len(LENGTHS), len(ks))
    np.testing.assert_array_equal(np.isnan(got), np.broadcast_to(np.array(LENGTHS)[:, None] == 0, got.shape))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bottom_k_means_accept_half_precision_values(dtype):
    lengths = [5, 300, 17]
    values = on_device(ragged_values(lengths, seed=2)).clamp(min=-1e4).to(dtype)
    got = bottom_k_means(values, on_device(offsets_of(lengths)), [0.2, 1.0]).cpu().numpy()
    expected = reference_bottom_k_means(values.float().cpu().numpy(), offsets_of(lengths), [0.2, 1.0])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.lists(st.floats(-60, 60, width=32), max_size=40), min_size=1, max_size=6),
    st.lists(st.floats(0.01, 1.0), min_size=1, max_size=5),
)
def test_bottom_k_means_property(texts, ks):
    values = np.array([v for t in texts for v in t], dtype=np.float32)
    offsets = offsets_of([len(t) for t in texts])
    got = bottom_k_means(on_device(values), on_device(offsets), ks).cpu().numpy()
    np.testing.assert_allclose(got, reference_bottom_k_means(values, offsets, ks), rtol=1e-6, atol=1e-6)


def dcpdd_case(lengths, vocab: int, seed: int):
    """Zipf-like ids (many repeats), log-probs and Laplace log-frequencies of a random count vector."""
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    ids = (rng.zipf(1.3, n) - 1) % vocab
    logp = np.maximum(-rng.exponential(4.0, n), -80).astype(np.float32)
    counts = rng.zipf(1.5, vocab).astype(np.float64) * (rng.random(vocab) < 0.7)
    log_f = np.log(counts + 1) - np.log(counts.sum() + vocab)
    return ids.astype(np.int64), logp, offsets_of(lengths), log_f


def assert_dcpdd_matches_reference(ids, logp, offsets, log_f, cap):
    first = first_occurrence_mask(ids, offsets)
    means = kernels.capped_first_occurrence_mean(
        on_device(ids), on_device(logp), on_device(first), on_device(offsets), on_device(log_f), cap
    )
    expected = capped_first_occurrence_mean(ids, logp, first, offsets, log_f, cap)
    got = means.cpu().numpy()
    np.testing.assert_array_equal(np.isnan(got), np.diff(offsets) == 0)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("cap", [0.01, 1e9])
def test_capped_first_occurrence_mean_matches_reference(cap):
    assert_dcpdd_matches_reference(*dcpdd_case(LENGTHS, vocab=3001, seed=3), cap=cap)


def test_capped_first_occurrence_mean_large_vocabulary():
    assert_dcpdd_matches_reference(*dcpdd_case([0, 2000, 1, 4097], vocab=50257, seed=4), cap=0.01)


def test_bad_aggregation_inputs_are_refused():
    values, offsets = torch.zeros(5), torch.tensor([0, 2, 5])
    with pytest.raises(ValueError, match="rise from 0"):
        bottom_k_means(values, torch.tensor([0, 2, 4]), [0.5])
    with pytest.raises(ValueError, match="rise from 0"):
        bottom_k_means(values, torch.tensor([0, 3, 2, 5]), [0.5])
    with pytest.raises(ValueError, match=r"fractions in \(0, 1\]"):
        reference_bottom_k_means(values.numpy(), offsets.numpy(), [0.0], backend="triton")
    with pytest.raises(ValueError, match="1-D"):
        bottom_k_means(values.view(5, 1), offsets, [0.5])
    first = torch.ones(5, dtype=torch.bool)
    with pytest.raises(ValueError, match="length of log_frequencies"):
        kernels.capped_first_occurrence_mean(
            torch.tensor([0, 1, 2, 3, 10]), values, first, offsets, torch.zeros(10), 0.01
        )
    with pytest.raises(ValueError, match="one length"):
        kernels.capped_first_occurrence_mean(torch.tensor([0, 1]), values, first, offsets, torch.zeros(10), 0.01)


def test_the_bottom_k_tile_is_halved_on_amd_where_its_lane_masks_take_scalar_register_pairs(monkeypatch):
    """On a 64-lane wavefront each comparison mask takes two scalar registers: the full tile spilled SGPRs at 8 and 16
    k's on gfx90a, gfx942 and gfx950 (benchmarks/kernels_aot.py), half of it does not. The results do not depend on
    the tile (each text's positions are read a tile at a time)."""
    aggregate = importlib.import_module("mia_fast.kernels.aggregate")
    for n_ks in (1, 2, 8, 10, 16):
        block_l, block_k = aggregate.bottom_k_blocks(n_ks)
        amd_l, amd_k = aggregate.bottom_k_blocks(n_ks, amd=True)
        assert amd_k == block_k and amd_l * amd_k <= aggregate.BOTTOM_K_TILE // 2 and amd_l <= block_l
    values = torch.randn(700, generator=torch.Generator().manual_seed(1))
    offsets = torch.tensor([0, 1, 300, 700])
    counts = torch.tensor([[1, 1], [30, 150], [4, 400]])
    expected = aggregate.bottom_k_means(values, offsets, counts)
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    torch.testing.assert_close(aggregate.bottom_k_means(values, offsets, counts), expected, rtol=0, atol=1e-12)
