"""DC-PDD (Zhang et al. 2024): token probabilities calibrated by their frequency in a reference corpus."""

from __future__ import annotations

import numpy as np

from mia_fast.methods.registry import NEEDS_FREQUENCIES, ScoringInputs, register
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean


@register("dcpdd", needs=[NEEDS_FREQUENCIES])
def dcpdd_score(inputs: ScoringInputs) -> np.ndarray:
    """DC-PDD: mean over first occurrences of min(p(x_t) * -ln f(x_t), a)."""
    stats = inputs.stats
    return capped_first_occurrence_mean(
        stats.target_ids,
        stats.logp,
        stats.first_occurrence,
        stats.offsets,
        inputs.log_frequencies,
        inputs.options.a,
        inputs.impl,
        inputs.device,
    )
