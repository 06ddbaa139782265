"""SURP (from the SoK benchmark of Meeus et al., github.com/computationalprivacy/mia_llms_benchmark,
``attacks/surp.py``): the mean log-probability of the "surprising" tokens, those the model was confident about
(entropy of its prediction below ``max_entropy`` nats, from mu: entropy = -mu) and yet gave the true token one of
the lowest k fraction of the text's log-probabilities. A model that has seen a text is rarely surprised by it,
so a higher score means a member.

Followed: the public code's selection, ``int(k * n)`` lowest log-probs (none when that is 0) intersected with the
positions of entropy below ``max_entropy`` (default 2.0), and its score for a text with no such token, -100 (its
``nan_to_num(nan=-100)``): far below any mean log-probability, so such a text ranks as the least likely member.
Deviations: a text with no scored token is NaN; tied log-probs at the cut are taken in position order (the
public code's ``torch.topk`` takes an unspecified one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import CheckedSettings, Range, setting
from mia_fast.ops.segments import segment_ids

# The public code's score of a text none of whose tokens is surprising.
NOTHING_SURPRISING = -100.0
# No vocabulary's entropy comes near 100 nats (e**100 tokens): a higher threshold makes every position confident.
MAX_ENTROPY = Range(0, 100, exclusive_minimum=True)


@dataclass(frozen=True)
class SurpSettings(CheckedSettings):
    max_entropy: float = setting(
        2.0, "entropy (nats) below which a position counts as confident", "surp-max-entropy", bounds=MAX_ENTROPY
    )


def surprising_means(
    logp: np.ndarray, entropy: np.ndarray, offsets: np.ndarray, ks: Sequence[float], max_entropy: float
) -> np.ndarray:
    """Mean log p over each text's surprising positions, for every k: float64 [texts, len(ks)]."""
    lengths = np.diff(offsets)
    texts = segment_ids(offsets)
    order = np.lexsort((np.arange(len(logp)), logp, texts))  # by text, then log p, ties in position order
    rank = np.arange(len(order)) - offsets[texts[order]]
    confident = (entropy < max_entropy)[order]
    values = np.asarray(logp, dtype=np.float64)[order]
    scores = np.full((len(lengths), len(ks)), np.nan)
    for j, k in enumerate(ks):
        counts = np.floor(lengths.astype(np.float64) * k).astype(np.int64)
        picked = confident & (rank < counts[texts[order]])
        n_picked = np.bincount(texts[order][picked], minlength=len(lengths))
        sums = np.bincount(texts[order][picked], weights=values[picked], minlength=len(lengths))
        with np.errstate(invalid="ignore", divide="ignore"):
            scores[:, j] = np.where(n_picked > 0, sums / n_picked, NOTHING_SURPRISING)
    scores[lengths == 0] = np.nan
    return scores


@register("surp", settings=[SurpSettings], takes_k=True, vocabulary=True)
def surp_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """SURP: mean log p over the lowest-k tokens at which the model was confident (low entropy)."""
    stats = inputs.stats
    return surprising_means(stats.logp, stats.entropy, stats.offsets, ks, inputs.settings.of(SurpSettings).max_entropy)
