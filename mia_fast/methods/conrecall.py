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

import numpy as np

from mia_fast.methods.recall import recall_pass
from mia_fast.methods.registry import (
    NEEDS_MEMBER_PREFIX,
    NEEDS_NONMEMBER_PREFIX,
    MethodOptions,
    ScoringInputs,
    mean_loss,
    register,
)
from mia_fast.pipeline.passes import PLAIN, Pass


def member_prefix_pass(options: MethodOptions) -> Pass:
    return Pass(prefix="".join(options.prefix_members))


@register(
    "conrecall",
    needs=[NEEDS_NONMEMBER_PREFIX, NEEDS_MEMBER_PREFIX],
    passes=lambda options: (PLAIN, recall_pass(options), member_prefix_pass(options)),
)
def conrecall_score(inputs: ScoringInputs) -> np.ndarray:
    """(loss(text | non-member prefix) - γ·loss(text | member prefix)) / loss(text)."""
    options = inputs.options
    nonmember = mean_loss(inputs.of(recall_pass(options)))
    member = mean_loss(inputs.of(member_prefix_pass(options)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (nonmember - options.gamma * member) / mean_loss(inputs.stats)
