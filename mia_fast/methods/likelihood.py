"""The likelihood baselines: loss and zlib (Carlini et al. 2021)."""

from __future__ import annotations

import zlib

import numpy as np

from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.registry import register


@register("loss", log_likelihood=True)
def loss_score(inputs: ScoringInputs) -> np.ndarray:
    """-loss: the mean log-likelihood of the scored tokens."""
    return -mean_loss(inputs.stats)


@register("zlib", log_likelihood=True)
def zlib_score(inputs: ScoringInputs) -> np.ndarray:
    """-loss / zlib-compressed length of the UTF-8 text (nats per compressed byte)."""
    compressed = np.array([len(zlib.compress(t.encode("utf-8"))) for t in inputs.texts], dtype=np.float64)
    return -mean_loss(inputs.stats) / compressed
