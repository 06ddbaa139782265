"""PAC, Polarized Augment Calibration (Ye et al. 2024, "Data Contamination Calibration for Black-box LLMs").

PD(x) = mean of the 5% highest token log-probabilities − mean of the 30% lowest (the polarized
distance, each count at least 1), and score = mean_j PD(a_j(x)) − PD(x), over copies a_j(x) of the text
with words swapped at random. A member's own order is polarised more than its shuffled copies', so a
higher score means a member.

Followed: the public code (github.com/yyy01/PAC, ``attack.py`` and ``src/eda.py``): token
log-probabilities of every token after the first; EDA's random swap with α = 0.3, i.e. on the text
split on single spaces, max(1, int(0.3·n)) swaps of two random positions (a swap given up after three
draws fail to find a second position); 5 copies (``pac_copies``); PAC = PD(x) − mean PD(copies), whose
AUROC the public code takes on −PAC: our score is −PAC. Deviation: each copy is seeded by (``seed``,
its index, the text), where the public code draws all texts' copies from one global stream, so ours
do not depend on which texts are scored together. Each copy index is one pass, so the engine batches
every text's j-th copy together; a copy equal to the text (one word) costs no second forward.
"""

from __future__ import annotations

import random
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.engines.stats import TokenStats
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import PER_TEXT, CheckedSettings, GivesExample, MethodSettings, method_seed, setting
from mia_fast.ops.reductions import REFERENCE_OPS, Ops

SWAP_FRACTION = 0.3
LOW_FRACTION = 0.3
HIGH_FRACTION = 0.05
SWAP_TRIES = 3


@dataclass(frozen=True)
class SwappedWords:
    """Copy ``copy`` of a text: EDA's random swap of its space-separated words."""

    copy: int
    seed: int = 0

    def __call__(self, text: str) -> str:
        words = text.split(" ")
        draw = random.Random(f"{self.seed}\0{self.copy}\0{text}")
        for _ in range(max(1, int(SWAP_FRACTION * len(words)))):
            first = draw.randrange(len(words))
            second = next((s for s in (draw.randrange(len(words)) for _ in range(SWAP_TRIES)) if s != first), None)
            if second is not None:
                words[first], words[second] = words[second], words[first]
        return " ".join(words)


DEFAULT_COPIES = 5


@dataclass(frozen=True)
class PacSettings(CheckedSettings, GivesExample):
    copies: int = setting(DEFAULT_COPIES, "word-swapped copies per text", "pac-copies", bounds=PER_TEXT)
    seed: int = method_seed()

    @classmethod
    def example(cls, model: Any) -> PacSettings:
        """Two copies a text: a quick check's cost."""
        return cls(copies=2)


def pac_passes(settings: MethodSettings) -> tuple[Pass, ...]:
    pac = settings.of(PacSettings)
    return tuple(Pass(transform=SwappedWords(copy, pac.seed)) for copy in range(pac.copies))


def polarized_distance(stats: TokenStats, ops: Ops = REFERENCE_OPS) -> np.ndarray:
    """Mean of the highest 5% of each text's token log-probabilities − mean of its lowest 30% (reduced by ``ops``)."""
    highest = -ops.bottom_k_means(-stats.logp, stats.offsets, [HIGH_FRACTION])[:, 0]
    lowest = ops.bottom_k_means(stats.logp, stats.offsets, [LOW_FRACTION])[:, 0]
    return highest - lowest


@register("pac", settings=[PacSettings], passes=lambda settings: (PLAIN, *pac_passes(settings)))
def pac_score(inputs: ScoringInputs) -> np.ndarray:
    """PAC: mean polarized distance of the word-swapped copies − that of the text."""
    copies = np.stack([polarized_distance(inputs.of(p), inputs.ops) for p in pac_passes(inputs.settings)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a text with no token: NaN, by design
        calibrated = np.nanmean(copies, axis=0)
    return calibrated - polarized_distance(inputs.stats, inputs.ops)
