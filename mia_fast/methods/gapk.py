"""Gap-K% (ACL 2026, "Gap-K%: Measuring Top-1 Prediction Gap for Detecting Pretraining Data"; public code
github.com/meaoww/gap-k, ``wikimia.py``).

g_t = (log p(x_t) - max_v log p_v) / sigma_t: how far the true token falls below the model's own top choice,
in units of the spread of log p at that position (sigma_t^2 = var_t, as in Min-K%++). The gaps are smoothed by
a moving average over ``window`` consecutive tokens, and the score is the mean of the lowest k fraction of the
smoothed gaps. A member's tokens sit close to the top choice, so a higher score means a member.

Everything comes from the plain pass: max log p is computed in the same read of the logits as log p, mu and
var (``mia_fast.ops.token_stats``), so Gap-K% costs no pass beyond Min-K%++'s.

Followed: the public code's ``window_lowmean``: var clamped below at 1e-8 before its square root, the smoothing
``np.convolve(g, ones(w) / w, "valid")`` (a text shorter than the window is not smoothed), then the mean of the
``max(1, int(n * k))`` lowest of the n smoothed values. Deviations: a text with no scored token is NaN, where the
public code gives 0.0; sigma is the centred variance of log p (the public code's uncentred
``E[p log^2 p] - mu^2`` loses digits on peaked rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import TOKENS, CheckedSettings, setting
from mia_fast.ops.segments import segment_moving_average

# The public code's floor on var, so that sigma is finite on fully peaked rows.
GAPK_VAR_FLOOR = 1e-8


@dataclass(frozen=True)
class GapkSettings(CheckedSettings):
    window: int = setting(
        3, "tokens each gap is averaged over before the lowest k are taken", "gapk-window", bounds=TOKENS
    )


def normalised_gaps(logp: np.ndarray, max_logp: np.ndarray, var: np.ndarray) -> np.ndarray:
    """(log p - max log p) / sigma at each position, float64."""
    sigma = np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), GAPK_VAR_FLOOR))
    return (np.asarray(logp, dtype=np.float64) - max_logp) / sigma


@register("gapk", settings=[GapkSettings], takes_k=True, vocabulary=True)
def gapk_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """Gap-K%: the lowest-k mean of the smoothed gap between each token's log p and the top choice's, over sigma."""
    stats = inputs.stats
    gaps = normalised_gaps(stats.logp, stats.max_logp, stats.var)
    smoothed, offsets = segment_moving_average(gaps, stats.offsets, inputs.settings.of(GapkSettings).window)
    return inputs.ops.bottom_k_means(smoothed, offsets, ks)
