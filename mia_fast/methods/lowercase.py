"""The lowercase baseline (Carlini et al. 2021): loss of the lowercased text against the text's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.registry import register


@dataclass(frozen=True)
class Lowercase:
    def __call__(self, text: str) -> str:
        return text.lower()


LOWERCASE = Pass(transform=Lowercase())


@register("lowercase", passes=lambda settings: (PLAIN, LOWERCASE))
def lowercase_score(inputs: ScoringInputs) -> np.ndarray:
    """loss(lowercased text) / loss(text)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return mean_loss(inputs.of(LOWERCASE)) / mean_loss(inputs.stats)
