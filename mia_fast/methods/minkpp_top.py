"""Min-K%++ through a server: ``minkpp_top{K}`` estimates the vocabulary's mean and variance of log p at each
position from the K likeliest log-probs a server returns (the mass they leave spread evenly over the rest of
the vocabulary: ``mia_fast.ops.top_logprobs``). An APPROXIMATION of ``minkpp``, named apart so that it is never
mistaken for it; its fidelity (rank correlation with exact ``minkpp`` per text, AUROC difference) is measured in
benchmarks/README.md. A model run here serves it too, from the same top K, to compare.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mia_fast.engines.passes import Pass, TopLogprobsReadout
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.mink import minkpp_of
from mia_fast.methods.registry import DEFAULT_METHODS, REGISTRY, register
from mia_fast.methods.settings import MethodSettings

# vLLM returns at most 20 top log-probs unless started with --max-logprobs.
TOP_KS = (5, 10, 20)


def _register(top: int) -> None:
    scored = Pass(readout=TopLogprobsReadout(top))

    def passes(settings: MethodSettings) -> tuple[Pass, ...]:
        return (scored,)

    def score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
        return minkpp_of(inputs.of(scored), ks, inputs)

    score.__doc__ = (
        f"Min-K%++ APPROXIMATED from the top {top} log-probs of each position (what a server returns): the rest of "
        "the vocabulary's mass spread evenly."
    )
    register(f"minkpp_top{top}", takes_k=True, passes=passes)(score)


for _top in TOP_KS:
    _register(_top)


def served_defaults(*, vocabulary_size_known: bool) -> tuple[str, ...]:
    """The default methods for a served model: those that read no statistic over the whole vocabulary, and Min-K%++
    estimated from the most top log-probs a server returns by default where the vocabulary's size is known."""
    kept = tuple(name for name in DEFAULT_METHODS if not REGISTRY[name].vocabulary)
    return kept + ((f"minkpp_top{max(TOP_KS)}",) if vocabulary_size_known else ())
