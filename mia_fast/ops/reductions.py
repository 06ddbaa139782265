"""``Ops``: the per-text reductions the methods run, on one backend and device, as one handle. A method calls
``inputs.ops.bottom_k_means(...)``; which implementation runs, and where, was decided once, when the handle was made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.ops.backend import check_backend
from mia_fast.ops.bottom_k import bottom_k_means
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean


@dataclass(frozen=True)
class Ops:
    """The per-text reductions on ``backend`` (``torch``: the numpy float64 reference; ``triton``: the kernels of
    ``mia_fast.kernels``) run on ``device`` (the kernels' device; None: CUDA where there is one)."""

    backend: str = "torch"
    device: Any = None

    def __post_init__(self) -> None:
        check_backend(self.backend)

    def bottom_k_means(self, values: np.ndarray, offsets: np.ndarray, ks: Sequence[float]) -> np.ndarray:
        """:func:`mia_fast.ops.bottom_k.bottom_k_means` here."""
        return bottom_k_means(values, offsets, ks, backend=self.backend, device=self.device)

    def capped_first_occurrence_mean(
        self,
        target_ids: np.ndarray,
        logp: np.ndarray,
        first_occurrence: np.ndarray,
        offsets: np.ndarray,
        log_frequencies: np.ndarray,
        cap: float,
    ) -> np.ndarray:
        """:func:`mia_fast.ops.first_occurrence.capped_first_occurrence_mean` here."""
        return capped_first_occurrence_mean(
            target_ids, logp, first_occurrence, offsets, log_frequencies, cap, backend=self.backend, device=self.device
        )


# The reference reductions, in float64 on the host: what a method runs where no run chose otherwise.
REFERENCE_OPS = Ops()
