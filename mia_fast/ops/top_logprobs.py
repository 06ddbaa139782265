"""The vocabulary's mean and variance of log p estimated from the top-K log-probs a server returns.

A server returns, per position, the log-probs of its K likeliest tokens and of the target; Min-K%++ needs
mu = sum_v p_v log p_v and var = sum_v p_v (log p_v)^2 - mu^2 over the whole vocabulary. The known tokens (the
top K, and the target where it is not among them) enter exactly. The mass they leave, R = 1 - sum_known p,
is spread evenly over the V - n_known other tokens, each with log p = log(R / (V - n_known)): the most even
completion of the known part (it maximises the entropy of the rest), which needs V. This is an approximation
wherever R carries mass that is not even; its fidelity is measured in benchmarks/README.md.
"""

from __future__ import annotations

import numpy as np


def approximate_moments(
    logp: np.ndarray, top: np.ndarray, target_in_top: np.ndarray, vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Estimated (mu, var) at each position: float32 [N] each, from the target's ``logp`` [N], the ``top`` log-probs
    [N, K] (NaN where a server returned fewer), whether the target is among them [N] and the vocabulary size."""
    top = np.asarray(top, dtype=np.float64)
    logp = np.asarray(logp, dtype=np.float64)
    known = ~np.isnan(top)
    values = np.where(known, top, -np.inf)
    extra = ~np.asarray(target_in_top, dtype=bool)
    probs = np.exp(values)
    mass = probs.sum(axis=1) + np.where(extra, np.exp(logp), 0.0)
    first = (probs * np.where(known, top, 0.0)).sum(axis=1) + np.where(extra, np.exp(logp) * logp, 0.0)
    second = (probs * np.where(known, top, 0.0) ** 2).sum(axis=1) + np.where(extra, np.exp(logp) * logp**2, 0.0)
    others = vocab_size - known.sum(axis=1) - extra
    rest = np.clip(1.0 - mass, 0.0, 1.0)
    spread = (rest > 0) & (others > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        each = np.where(spread, np.log(rest / np.maximum(others, 1)), 0.0)
    first += np.where(spread, rest * each, 0.0)
    second += np.where(spread, rest * each**2, 0.0)
    return first.astype(np.float32), np.maximum(second - first**2, 0.0).astype(np.float32)
