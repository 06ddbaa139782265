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


def segment_moving_average(values: np.ndarray, offsets: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Each text's means over every run of ``window`` consecutive values (numpy's ``convolve(..., "valid")`` with
    a flat kernel), a text shorter than ``window`` kept as it is: float64 values and their ``offsets``."""
    values = np.asarray(values, dtype=np.float64)
    lengths = np.diff(offsets)
    long_enough = lengths >= window
    smoothed_lengths = np.where(long_enough, lengths - window + 1, lengths)
    new_offsets = np.concatenate([[0], np.cumsum(smoothed_lengths)]).astype(np.int64)
    starts = np.repeat(offsets[:-1] - new_offsets[:-1], smoothed_lengths) + np.arange(new_offsets[-1])
    widths = np.repeat(np.where(long_enough, window, 1), smoothed_lengths)
    # A sum of ``window`` terms per output (the window is a few tokens), never a difference of running sums, so
    # no output loses digits to the values before it.
    sums = values[starts].copy()
    for step in range(1, window):
        inside = step < widths
        sums[inside] += values[starts[inside] + step]
    return sums / widths, new_offsets
