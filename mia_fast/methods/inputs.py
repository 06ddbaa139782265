"""What a method reads: ``ScoringInputs``, the texts, the passes' results, the run's settings and where the per-text
reductions run; and the mean loss of a pass's TokenStats (:func:`mean_loss`), which many methods build on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.engines.stats import TokenStats
from mia_fast.methods.settings import MethodSettings
from mia_fast.ops.reductions import REFERENCE_OPS, Ops


@dataclass(frozen=True)
class ScoringInputs:
    """Everything a method may read: the texts, the plain pass's TokenStats, the results of the other passes
    and the run's settings."""

    stats: TokenStats | None
    passes: Mapping[Pass, Any] = field(default_factory=dict)
    texts: Sequence[str] | None = None
    settings: MethodSettings = field(default_factory=MethodSettings)
    ops: Ops = REFERENCE_OPS  # the per-text reductions: on which backend (reference or Triton kernels) and device
    # The inputs of the known texts a method compares the scored texts with (its ``calibration``), run through the
    # same passes, keyed by those texts as its settings give them.
    calibration: Mapping[tuple[str, ...], ScoringInputs] = field(default_factory=dict)

    def of(self, needed: Pass) -> Any:
        """The result of a pass: TokenStats, or hidden states for a hidden-state readout."""
        return self.stats if needed == PLAIN else self.passes[needed]

    def has(self, needed: Pass) -> bool:
        return self.stats is not None if needed == PLAIN else needed in self.passes


def mean_loss(stats: TokenStats) -> np.ndarray:
    """Mean negative log-likelihood of each text's scored tokens (NaN for a text with none)."""
    return -stats.mean_logp
