"""The reference-model baseline (Carlini et al. 2021): the target's loss against a smaller model's."""

from __future__ import annotations

import numpy as np

from mia_fast.engines.passes import PLAIN, REFERENCE, Pass
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.registry import register

REFERENCE_PASS = Pass(model=REFERENCE)
# The name other modules add it by (dataset inference, where a reference model is given).
REFERENCE_RATIO = "ref"


@register(REFERENCE_RATIO, passes=lambda settings: (PLAIN, REFERENCE_PASS))
def reference_score(inputs: ScoringInputs) -> np.ndarray:
    """loss under the reference model (its own tokenizer) minus loss under the target model."""
    return mean_loss(inputs.of(REFERENCE_PASS)) - mean_loss(inputs.stats)
