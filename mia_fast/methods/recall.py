"""ReCaLL (Xie et al. 2024, "ReCaLL: Membership Inference via Relative Conditional Log-Likelihoods").

score = loss(text | P) / loss(text) = LL(x | P) / LL(x), where P is a fixed prefix of known
non-member texts whose tokens are not scored. A non-member prefix lowers the likelihood of members
more than that of non-members, so a higher ratio means a member.

As in the public code (github.com/ruoyuxie/recall, ``src/run.py``), the prefix is the non-member
texts joined with nothing between them, tokenized on its own and placed before the text's own ids.
Deviations, both deliberate:
- the text keeps its start token after the prefix, so the two likelihoods average over exactly the
  same tokens (the public code agrees for tokenizers that add a BOS token, e.g. Llama's; for
  GPT-2-style tokenizers it scores one more token in the conditional pass);
- a prefix text that is also a scored text is refused, where the public code lets its prefix shots
  leak into the evaluation set if they are not removed by hand; a prefix longer than half the model
  window is refused rather than cut.
"""

from __future__ import annotations

import numpy as np

from mia_fast.methods.registry import NEEDS_NONMEMBER_PREFIX, MethodOptions, ScoringInputs, mean_loss, register
from mia_fast.pipeline.passes import PLAIN, Pass


def recall_pass(options: MethodOptions) -> Pass:
    return Pass(prefix="".join(options.prefix_nonmembers))


@register("recall", needs=[NEEDS_NONMEMBER_PREFIX], passes=lambda options: (PLAIN, recall_pass(options)))
def recall_score(inputs: ScoringInputs) -> np.ndarray:
    """loss(text | non-member prefix) / loss(text)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return mean_loss(inputs.of(recall_pass(inputs.options))) / mean_loss(inputs.stats)
