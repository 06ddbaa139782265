"""EZ-MIA, Error Zone membership inference (Ilić, Stanojević & Cvejoski 2026, "Powerful Training-Free Membership
Inference Against Fine-Tuned Autoregressive Language Models", arXiv:2601.12104).

At the tokens the target mispredicts (its top choice is not the text's token: the error zone E), δ_t = log p_T(x_t) −
log p_R(x_t) is how far the target moved the token's log-prob from the reference model's; P = Σ_E max(δ_t, 0) is the
mass moved up, N = Σ_E max(−δ_t, 0) the mass moved down, and score = P / N. Training on a text pushes its tokens up
even where the model still gets them wrong, so a higher score means a member. A text with N = 0 (every shift in E
upward, or none at all, or no token mispredicted) is a member outright (the paper's appendix E.5, E.6).

Followed: LeakPro (github.com/aidotse/LeakPro, PR #461: ``leakpro/attacks/mia_attacks/llm/ez_mia.py``, its default
``aggregation="ratio"``, with ``abstract_llm_mia.py`` and ``leakpro/signals/token_evidence.py``): every token after
the first is scored, mispredicted where the target's arg-max is another id, P / N as is. Deviations: LeakPro ranks the
texts with N = 0 above every other text of the audit, and among themselves by P (``rank_top``), so their scores
depend on which texts are scored together; here such a text scores 2^1023 · (1 + P / (1 + P)), in [2^1023, 2^1024):
finite, far above any ratio (N > 0 is at least a float32 rounding step of a log-prob, P a sum of log-probs) and ordered
by P, so texts rank as LeakPro ranks them, text by text. A token is mispredicted where its log-prob is below the
target's highest (``max_logp``), which differs from the arg-max only where two ids tie exactly for the top. The
reference scores the text as its own tokenizer splits it and its tokens are paired with the target's by the characters
they cover (``mia_fast.methods.reference_tokens``), where LeakPro feeds both models the same ids. Not followed: the
standalone port of the authors' tool (LeakPro PR #454, ``leakpro/llm_attacks/mia/ez_score.py``), which also leaves out
the first scored token, divides by N + 1e-12 and scores 0 where N = 0 or fewer than two tokens are mispredicted
(against the paper's appendix E).
"""

from __future__ import annotations

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.methods.reference_tokens import paired_tokens, token_passes
from mia_fast.methods.registry import register
from mia_fast.ops.segments import segment_ids

# Where a text with no downward shift scores: above any ratio, with room below 2^1024 to order such texts by P.
MEMBER_OUTRIGHT = 2.0**1023


def error_zone_ratio(
    target_logp: np.ndarray, target_max_logp: np.ndarray, reference_logp: np.ndarray, offsets: np.ndarray
) -> np.ndarray:
    """P / N of each text's tokens (flat arrays split by ``offsets``), or 2^1023 · (1 + P / (1 + P)) where N = 0;
    NaN for a text with no token."""
    target_logp = np.asarray(target_logp, dtype=np.float64)
    shift = np.where(target_logp < target_max_logp, target_logp - reference_logp, 0.0)
    texts, lengths = segment_ids(offsets), np.diff(offsets)
    up = np.bincount(texts, np.maximum(shift, 0.0), minlength=len(lengths))
    down = np.bincount(texts, np.maximum(-shift, 0.0), minlength=len(lengths))
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(down > 0, up / down, MEMBER_OUTRIGHT * (1 + up / (1 + up)))
    score[lengths == 0] = np.nan
    return score


@register("ezmia", passes=token_passes)
def ezmia_score(inputs: ScoringInputs) -> np.ndarray:
    """EZ-MIA: log-prob mass moved up over mass moved down from the reference, at the tokens the target mispredicts."""
    pairs = paired_tokens(inputs, "ezmia")
    target = inputs.stats
    max_logp = target.max_logp[pairs.target]
    if np.isnan(max_logp).any():
        raise MiaFastError(
            "ezmia needs the log-prob of the target's own top choice at each token, which these statistics lack "
            "(a served model's plain pass does not return it)"
        )
    reference_logp = inputs.of(REFERENCE_PASS).logp[pairs.reference]
    return error_zone_ratio(target.logp[pairs.target], max_logp, reference_logp, pairs.offsets)
