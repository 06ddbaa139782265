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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.registry import register
from mia_fast.methods.settings import CheckedSettings, ChecksTexts, Flag, GivesExample, MethodSettings, known_texts


def refuse_prefix_overlap(texts: Sequence[str], prefix: Sequence[str], role: str = "prefix") -> None:
    """A text used in a prefix (known member or non-member), or as another known ``role`` (e.g. a non-member
    reference), must not also be judged: it would bias its own score."""
    known = {p.strip() for p in prefix}
    shared = [t for t in texts if t.strip() and t.strip() in known]
    if shared:
        example = shared[0] if len(shared[0]) <= 60 else shared[0][:57] + "..."
        raise MiaFastError(
            f"{len(shared)} scored text(s) are also {role} texts (e.g. {example!r}); "
            f"{role} texts must be known texts that are not themselves scored"
        )


@dataclass(frozen=True)
class RecallSettings(CheckedSettings, ChecksTexts, GivesExample):
    prefix_nonmembers: tuple[str, ...] = known_texts(
        Flag("prefix-nonmembers"),
        "known non-member texts for the prefix (.txt a text per line, or any DATA format with --text-field)",
        "known non-member texts for its prefix (--prefix-nonmembers FILE)",
    )

    def check_texts(self, texts: Sequence[str]) -> None:
        refuse_prefix_overlap(texts, self.prefix_nonmembers)

    @classmethod
    def example(cls, model: Any) -> RecallSettings:
        """A prefix of one short text, written for the example (a long prefix leaves a small model's window no
        room)."""
        return cls(prefix_nonmembers=("a known non-member text. ",))


def recall_pass(settings: MethodSettings) -> Pass:
    return Pass(prefix="".join(settings.of(RecallSettings).prefix_nonmembers))


@register("recall", settings=[RecallSettings], passes=lambda settings: (PLAIN, recall_pass(settings)))
def recall_score(inputs: ScoringInputs) -> np.ndarray:
    """ReCaLL: loss(text | non-member prefix) / loss(text)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return mean_loss(inputs.of(recall_pass(inputs.settings))) / mean_loss(inputs.stats)
