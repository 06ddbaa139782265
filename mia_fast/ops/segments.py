"""Ragged per-text arrays (flat values split by ``offsets`` [texts + 1]): the layout every per-text
reduction reads."""

from __future__ import annotations

import numpy as np


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """Index of the text each flat position belongs to."""
    return np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))


def segment_mean(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Mean of each text's values (float64); NaN for a text with no positions."""
    lengths = np.diff(offsets)
    scored = lengths > 0
    means = np.full(len(lengths), np.nan)
    if scored.any():
        # Each nonempty text's sum runs from its start to the next nonempty text's start: the empty ones between
        # hold nothing.
        means[scored] = np.add.reduceat(values[: offsets[-1]], offsets[:-1][scored], dtype=np.float64) / lengths[scored]
    return means


def to_device(array: np.ndarray, dtype: np.dtype, device):
    """``array`` as a contiguous torch tensor of ``dtype`` on ``device`` (for the kernels)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)
