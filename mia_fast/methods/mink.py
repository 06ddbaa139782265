"""Min-K% Prob (Shi et al. 2024) and Min-K%++ (Zhang et al. 2025): bottom-k means of per-token scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mia_fast.engines.stats import TokenStats
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register

# Floor on var in Min-K%++ so that z is finite on fully peaked rows.
VAR_FLOOR = 1e-12


@register("mink", takes_k=True, log_likelihood=True)
def mink_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """Min-K% Prob: mean of the k-fraction lowest token log-probabilities."""
    stats = inputs.stats
    return inputs.ops.bottom_k_means(stats.logp, stats.offsets, ks)


@register("minkpp", takes_k=True, vocabulary=True)
def minkpp_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """Min-K%++: the same bottom-k mean over z = (logp - mu) / sqrt(var)."""
    return minkpp_of(inputs.stats, ks, inputs)


def minkpp_of(stats: TokenStats, ks: Sequence[float], inputs: ScoringInputs) -> np.ndarray:
    """Min-K%++ of ``stats`` at every k (their mu and var exact, or estimated)."""
    z = (stats.logp.astype(np.float64) - stats.mu) / np.sqrt(np.maximum(stats.var.astype(np.float64), VAR_FLOOR))
    return inputs.ops.bottom_k_means(z, stats.offsets, ks)
