"""DC-PDD's reduction: which positions hold the first occurrence of their id within their text, and
the capped mean of p(x_t) * -ln f(x_t) over those positions."""

from __future__ import annotations

import numpy as np

from mia_fast.ops.backend import implementation, numpy_kernel
from mia_fast.ops.segments import segment_ids, segment_mean


def first_occurrence_mask(target_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """True where a position holds the first occurrence of its id within its text."""
    mask = np.zeros(len(target_ids), dtype=bool)
    if len(target_ids) == 0:
        return mask
    key = segment_ids(offsets) * (int(target_ids.max()) + 1) + target_ids
    _, first = np.unique(key, return_index=True)
    mask[first] = True
    return mask


def capped_first_occurrence_mean(
    target_ids: np.ndarray,
    logp: np.ndarray,
    first_occurrence: np.ndarray,
    offsets: np.ndarray,
    log_frequencies: np.ndarray,
    cap: float,
    *,
    backend: str = "torch",
    device=None,
) -> np.ndarray:
    """Per text, the mean over its first occurrences of min(exp(logp) * -log_frequencies[id], cap)
    (float64); NaN for a text with no positions. ``backend="triton"`` runs the kernel on ``device``."""
    dtypes = (np.int64, np.float32, np.bool_, np.int64, np.float64, None)
    run = implementation(backend, _reference_capped_mean, numpy_kernel("capped_first_occurrence_mean", dtypes, device))
    return run(target_ids, logp, first_occurrence, offsets, log_frequencies, cap)


def _reference_capped_mean(
    target_ids: np.ndarray, logp: np.ndarray, first: np.ndarray, offsets: np.ndarray, log_f: np.ndarray, cap: float
) -> np.ndarray:
    alpha = np.exp(logp[first].astype(np.float64)) * -log_f[target_ids[first]]
    first_offsets = np.concatenate([[0], np.cumsum(first)])[offsets]
    return segment_mean(np.minimum(alpha, cap), first_offsets)
