"""Segment reductions the methods share, over ragged per-text arrays in the TokenStats layout.

Two back ends with one contract: :data:`NUMPY` (the reference, float64 on the CPU) and
:class:`TritonReductions` (the aggregation kernels of ``mia_fast.kernels`` on the engine's device).
Counts are exactly ``max(1, floor(k * n))`` in both; values agree to about 1e-7 relative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

from mia_fast.stats import TokenStats


def segment_mean(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Mean of each text's values (float64); NaN for a text with no positions."""
    lengths = np.diff(offsets)
    segments = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    sums = np.bincount(segments, weights=values.astype(np.float64), minlength=len(lengths))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(lengths > 0, sums / np.maximum(lengths, 1), np.nan)


def bottom_k_counts(lengths: np.ndarray, ks: Sequence[float]) -> np.ndarray:
    """max(1, floor(k*n)) for each text and k, as int64 [n_texts, len(ks)].

    floor(k*n) is taken in float64 exactly as the public code's ``int(len * ratio)``.
    """
    counts = np.floor(lengths[:, None].astype(np.float64) * np.asarray(ks, dtype=np.float64)[None, :])
    return np.maximum(counts.astype(np.int64), 1)


class Reductions(Protocol):
    def bottom_k_means(self, values: np.ndarray, offsets: np.ndarray, ks: Sequence[float]) -> np.ndarray:
        """Mean of each text's ``max(1, floor(k*n))`` lowest values, for every k: float64 [n_texts, len(ks)];
        NaN for a text with no positions."""

    def capped_first_occurrence_mean(self, stats: TokenStats, log_frequencies: np.ndarray, cap: float) -> np.ndarray:
        """Per text, the mean over the first occurrence of each id of min(p(x_t) * -ln f(x_t), cap)."""


class NumpyReductions:
    def bottom_k_means(self, values: np.ndarray, offsets: np.ndarray, ks: Sequence[float]) -> np.ndarray:
        # One segmented sort serves all k. Sums are taken per text (reduceat), not as differences of a
        # running sum over all texts, where one huge value would wipe out every later text's digits.
        lengths = np.diff(offsets)
        segments = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        ordered = np.append(values[np.lexsort((values, segments))].astype(np.float64), 0.0)
        counts = bottom_k_counts(lengths, ks)
        scored = lengths > 0
        means = np.full(counts.shape, np.nan)
        starts = offsets[:-1][scored]
        for j in range(counts.shape[1]):
            bounds = np.stack([starts, starts + counts[scored, j]], axis=1).ravel()
            means[scored, j] = np.add.reduceat(ordered, bounds)[::2] / counts[scored, j]
        return means

    def capped_first_occurrence_mean(self, stats: TokenStats, log_frequencies: np.ndarray, cap: float) -> np.ndarray:
        first = stats.first_occurrence
        alpha = np.exp(stats.logp[first].astype(np.float64)) * -log_frequencies[stats.target_ids[first]]
        first_offsets = np.concatenate([[0], np.cumsum(first)])[stats.offsets]
        return segment_mean(np.minimum(alpha, cap), first_offsets)


NUMPY = NumpyReductions()


@dataclass(frozen=True)
class TritonReductions:
    """The aggregation kernels on ``device`` (CUDA, or the CPU under ``TRITON_INTERPRET=1``)."""

    device: torch.device

    def _tensor(self, array: np.ndarray, dtype: np.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(self.device)

    def bottom_k_means(self, values: np.ndarray, offsets: np.ndarray, ks: Sequence[float]) -> np.ndarray:
        from mia_fast.kernels import bottom_k_means

        means = bottom_k_means(self._tensor(values, np.float32), self._tensor(offsets, np.int64), ks)
        return means.cpu().numpy()

    def capped_first_occurrence_mean(self, stats: TokenStats, log_frequencies: np.ndarray, cap: float) -> np.ndarray:
        from mia_fast.kernels import first_occurrence_capped_mean

        _, means = first_occurrence_capped_mean(
            self._tensor(stats.target_ids, np.int64),
            self._tensor(stats.logp, np.float32),
            self._tensor(stats.offsets, np.int64),
            self._tensor(log_frequencies, np.float64),
            cap,
        )
        return means.cpu().numpy()
