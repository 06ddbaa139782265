"""WBC, Window-Based Comparison (Chen et al. 2026, "Window-based Membership Inference Attacks Against Fine-tuned Large
Language Models", arXiv:2601.02751).

For each window size w, every run of w consecutive tokens of the text votes for a member when the reference model's
loss summed over it exceeds the target's; the text's vote share is averaged over the window sizes:
score = mean_w mean_i [Σ_{t in window i} loss_R(x_t) > Σ_{t in window i} loss_T(x_t)], in [0, 1]. Training on a text
lowers the target's loss on it, so a higher score means a member; the sign vote is not swayed by a few tokens whose
loss difference is huge, as a mean loss difference (``ref``) is.

Followed: Nikkei's fast-mia (github.com/Nikkei/fast-mia, branch ``feature/WBC``, ``src/methods/wbc.py``): window sizes
1, 5, 10 and 20 (``wbc_windows``), windows every token apart (numpy's ``convolve(..., "valid")`` with a flat kernel),
strictly greater sums, each token after the first scored (vLLM's prompt log-probs); a text shorter than a window is
one window of all its tokens. Deviation: the reference scores the text as its own tokenizer splits it and its tokens
are paired with the target's by the characters they cover (``mia_fast.methods.reference_tokens``), where fast-mia pairs
the two lists of log-probs by position, cut to the shorter (the same where both tokenizers split the text alike).
A text with no paired token scores NaN (fast-mia: 0). Not followed: LeakPro's WBC (PR #461,
``leakpro/attacks/mia_attacks/llm/wbc.py``), which takes 10 window sizes spaced geometrically from 2 to 40 and leaves
a window size that does not fit a text out of its mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.methods.reference_tokens import paired_tokens, token_passes
from mia_fast.methods.registry import register
from mia_fast.methods.settings import TOKENS, Flag, setting
from mia_fast.ops.segments import segment_ids, segment_mean, segment_moving_average

DEFAULT_WINDOWS = (1, 5, 10, 20)


def window_sizes(text: str) -> tuple[int, ...]:
    """Comma-separated window sizes, each a whole number of tokens."""
    return tuple(TOKENS.parse(part) for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class WbcSettings:
    windows: tuple[int, ...] = setting(
        DEFAULT_WINDOWS,
        "comma-separated window sizes, in tokens",
        Flag("wbc-windows", metavar="SIZES", parse=window_sizes),
    )

    def __post_init__(self) -> None:
        windows = tuple(self.windows or ())
        if not windows or not all(TOKENS.contains(w) for w in windows):
            raise MiaFastError(
                f"WbcSettings.windows (--wbc-windows) must be whole numbers >= 1 and <= {TOKENS.maximum}, "
                f"got {self.windows!r}"
            )
        object.__setattr__(self, "windows", windows)


def window_votes(target_loss: np.ndarray, reference_loss: np.ndarray, offsets: np.ndarray, window: int) -> np.ndarray:
    """Per text (flat losses split by ``offsets``), the share of its runs of ``window`` tokens (all of them, for a
    text shorter than that) over which the reference's loss sums to more than the target's; NaN for a text with
    none."""
    target_means, runs = segment_moving_average(target_loss, offsets, window)
    reference_means, _ = segment_moving_average(reference_loss, offsets, window)
    votes = segment_mean((reference_means > target_means).astype(np.float64), runs)
    lengths = np.diff(offsets)
    short = (lengths > 0) & (lengths < window)
    if short.any():
        texts = segment_ids(offsets)
        target_total = np.bincount(texts, target_loss, len(lengths))
        votes[short] = np.bincount(texts, reference_loss, len(lengths))[short] > target_total[short]
    return votes


@register("wbc", settings=[WbcSettings], passes=token_passes)
def wbc_score(inputs: ScoringInputs) -> np.ndarray:
    """WBC: share of token windows where the reference's loss exceeds the target's, averaged over window sizes."""
    pairs = paired_tokens(inputs, "wbc")
    target_loss = -inputs.stats.logp[pairs.target].astype(np.float64)
    reference_loss = -inputs.of(REFERENCE_PASS).logp[pairs.reference].astype(np.float64)
    windows = inputs.settings.of(WbcSettings).windows
    return np.mean([window_votes(target_loss, reference_loss, pairs.offsets, w) for w in windows], axis=0)
