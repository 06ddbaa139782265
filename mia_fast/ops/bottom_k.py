"""Min-K% and Min-K%++'s reduction: the mean of each text's ``max(1, floor(k * n))`` lowest values,
for every k at once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mia_fast.ops.backend import implementation, numpy_kernel

# Values sorted at once in the reference: a few tens of MB, so that a block stays near the caches.
_BLOCK_CELLS = 1 << 22


def bottom_k_counts(lengths: np.ndarray, ks: Sequence[float]) -> np.ndarray:
    """max(1, floor(k*n)) for each text and k, as int64 [n_texts, len(ks)].

    floor(k*n) is taken in float64 exactly as the public code's ``int(len * ratio)``.
    """
    counts = np.floor(np.asarray(lengths)[:, None].astype(np.float64) * np.asarray(ks, dtype=np.float64)[None, :])
    return np.maximum(counts.astype(np.int64), 1)


def bottom_k_means(
    values: np.ndarray, offsets: np.ndarray, ks: Sequence[float], *, backend: str = "torch", device=None
) -> np.ndarray:
    """Mean of each text's ``max(1, floor(k*n))`` lowest values, for every k: float64 [n_texts, len(ks)];
    NaN for a text with no positions. ``backend="triton"`` runs the kernel on ``device``."""
    kernel = numpy_kernel("bottom_k_means", (np.float32, np.int64, np.int64), device)
    run = implementation(backend, _sorted_bottom_k_means, kernel)
    if not len(ks) or not all(0.0 < k <= 1.0 for k in ks):
        raise ValueError(f"ks must be fractions in (0, 1], got {list(ks)}")
    return run(values, offsets, bottom_k_counts(np.diff(offsets), ks))


def _sorted_bottom_k_means(values: np.ndarray, offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    # Texts are taken in order of length, a block at a time, each padded with NaN (sorted last) to its
    # block's longest: a sort along rows of a 2-D block is many times faster than one segmented sort of
    # everything. Sums run along each text's own row, so one huge value cannot wipe out other texts' digits.
    lengths = np.diff(offsets)
    means = np.full(counts.shape, np.nan)
    order = np.argsort(lengths, kind="stable")
    order = order[lengths[order] > 0]
    start = 0
    while start < len(order):
        # As many rows as fit the budget at the width of the longest row the shortest one's budget would reach.
        reach = min(start + _BLOCK_CELLS // int(lengths[order[start]]), len(order)) - 1
        end = min(start + max(_BLOCK_CELLS // int(lengths[order[reach]]), 1), len(order))
        rows = order[start:end]
        row_lengths = lengths[rows]
        width = int(row_lengths[-1])
        first = int(offsets[rows[0]])
        if (
            row_lengths[0] == width
            and offsets[rows[-1]] - first == (len(rows) - 1) * width
            and np.all(np.diff(rows) == 1)
        ):
            block = (
                values[first : first + len(rows) * width].reshape(len(rows), width).copy()
            )  # texts of one length, side by side
        else:
            row_starts = np.cumsum(row_lengths) - row_lengths
            within = np.arange(int(row_lengths.sum())) - np.repeat(row_starts, row_lengths)
            block = np.full((len(rows), width), np.nan, dtype=values.dtype)
            block[np.repeat(np.arange(len(rows)), row_lengths), within] = values[
                np.repeat(offsets[rows], row_lengths) + within
            ]
        block.sort(axis=1)
        sums = np.cumsum(block.astype(np.float64), axis=1)
        picked = counts[rows]
        means[rows] = np.take_along_axis(sums, picked - 1, axis=1) / picked
        start = end
    return means
