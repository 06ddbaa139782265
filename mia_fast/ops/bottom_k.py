"""Min-K% and Min-K%++'s reduction: the mean of each text's ``max(1, floor(k * n))`` lowest values,
for every k at once."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mia_fast.ops.impl import check_impl, kernel_device
from mia_fast.ops.segments import segment_ids, to_device


def bottom_k_counts(lengths: np.ndarray, ks: Sequence[float]) -> np.ndarray:
    """max(1, floor(k*n)) for each text and k, as int64 [n_texts, len(ks)].

    floor(k*n) is taken in float64 exactly as the public code's ``int(len * ratio)``.
    """
    counts = np.floor(np.asarray(lengths)[:, None].astype(np.float64) * np.asarray(ks, dtype=np.float64)[None, :])
    return np.maximum(counts.astype(np.int64), 1)


def bottom_k_means(
    values: np.ndarray, offsets: np.ndarray, ks: Sequence[float], impl: str = "torch", device=None
) -> np.ndarray:
    """Mean of each text's ``max(1, floor(k*n))`` lowest values, for every k: float64 [n_texts, len(ks)];
    NaN for a text with no positions. ``impl="triton"`` runs the kernel on ``device``."""
    check_impl(impl)
    if not len(ks) or not all(0.0 < k <= 1.0 for k in ks):
        raise ValueError(f"ks must be fractions in (0, 1], got {list(ks)}")
    counts = bottom_k_counts(np.diff(offsets), ks)
    if impl == "triton":
        from mia_fast.kernels import bottom_k_means as kernel
        device = kernel_device(device)
        means = kernel(to_device(values, np.float32, device), to_device(offsets, np.int64, device), to_device(counts, np.int64, device))
        return means.cpu().numpy()
    return _sorted_bottom_k_means(values, offsets, counts)


def _sorted_bottom_k_means(values: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    # One segmented sort serves all k. Sums are taken per text (reduceat), not as differences of a
    # running sum over all texts, where one huge value would wipe out every later text's digits.
    lengths = np.diff(offsets)
    ordered = np.append(values[np.lexsort((values, segment_ids(offsets)))].astype(np.float64), 0.0)
    scored = lengths > 0
    means = np.full(counts.shape, np.nan)
    starts = offsets[:-1][scored]
    for j in range(counts.shape[1]):
        bounds = np.stack([starts, starts + counts[scored, j]], axis=1).ravel()
        means[scored, j] = np.add.reduceat(ordered, bounds)[::2] / counts[scored, j]
    return means
