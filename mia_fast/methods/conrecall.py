"""Con-ReCall (Wang et al. 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via Contrastive Decoding").

score = (LL(x | P_non) - γ·LL(x | P_mem)) / LL(x) = (loss(x | P_non) - γ·loss(x | P_mem)) / loss(x),

with P_non a prefix of known non-member texts, P_mem one of known member texts, LL the mean token
log-likelihood of x's own tokens. A member's likelihood falls more under the non-member prefix and
rises more under the member prefix than a non-member's, so a higher score means a member.

Followed: the public code (github.com/WangCheng0116/CON-RECALL, ``run.py``): each prefix is its texts
joined with nothing between them, tokenized on its own and placed before the text's ids; the same
two prefixes for every text; γ = 0.5 by default as in Fast-MIA's ``conrecall.py`` (the paper's code
sweeps γ over 0.1..1.0). Deviations, as for ReCaLL (see ``recall``): the text keeps its start token
after the prefix so the three likelihoods average over exactly the same tokens; prefix texts that are
also scored texts are refused (the public code removes them from its own split by hand, Fast-MIA
does not); a prefix longer than half the model window is refused rather than cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.recall import RecallSettings, recall_pass, refuse_prefix_overlap
from mia_fast.methods.registry import register
from mia_fast.methods.settings import (
    CheckedSettings,
    ChecksTexts,
    Flag,
    GivesExample,
    MethodSettings,
    Range,
    known_texts,
    setting,
)

DEFAULT_GAMMA = 0.5
# Past a weight of ±100 the member prefix's term alone decides the score.
GAMMA = Range(-100, 100)


@dataclass(frozen=True)
class ConRecallSettings(CheckedSettings, ChecksTexts, GivesExample):
    prefix_members: tuple[str, ...] = known_texts(
        Flag("prefix-members"),
        "known member texts for the member prefix (same formats as --prefix-nonmembers)",
        "known member texts for its prefix (--prefix-members FILE)",
    )
    gamma: float = setting(DEFAULT_GAMMA, "the weight of the member prefix", "conrecall-gamma", bounds=GAMMA)

    def check_texts(self, texts: Sequence[str]) -> None:
        refuse_prefix_overlap(texts, self.prefix_members)

    @classmethod
    def example(cls, model: Any) -> ConRecallSettings:
        """A member prefix of one short text, written for the example (with ReCaLL's example for the other)."""
        return cls(prefix_members=("a known member text. ",))


def member_prefix_pass(settings: MethodSettings) -> Pass:
    return Pass(prefix="".join(settings.of(ConRecallSettings).prefix_members))


@register(
    "conrecall",
    settings=[RecallSettings, ConRecallSettings],
    passes=lambda settings: (PLAIN, recall_pass(settings), member_prefix_pass(settings)),
)
def conrecall_score(inputs: ScoringInputs) -> np.ndarray:
    """Con-ReCall: (loss(text | non-member prefix) - γ·loss(text | member prefix)) / loss(text)."""
    nonmember = mean_loss(inputs.of(recall_pass(inputs.settings)))
    member = mean_loss(inputs.of(member_prefix_pass(inputs.settings)))
    gamma = inputs.settings.of(ConRecallSettings).gamma
    with np.errstate(invalid="ignore", divide="ignore"):
        return (nonmember - gamma * member) / mean_loss(inputs.stats)
