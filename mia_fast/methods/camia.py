"""CAMIA (Chang et al., EMNLP 2025, "Context-Aware Membership Inference Attacks against Pre-trained Large Language
Models").

A text's loss is not one number but a sequence, and how it moves tells members apart: CAMIA turns each text's
per-token log-probabilities x_t (of the plain pass) and those of the text repeated (one more pass over the text
followed by five copies of itself, each after a space) into 75 features, gives each feature the p-value of its
value among the same feature of known NON-MEMBER texts (``--nonmembers``, run through the same two passes), and
scores the text by minus the mean of its 75 p-values: a text that looks unlike the non-members on many features
(small p-values) scores high, i.e. higher = more likely a member, in [-1, 0].

Followed: the public code (github.com/changhongyan123/context_aware_mia), its default path: the two passes of
``run_ours_construct_mia_data.py`` (``num_repeatitions = 5``), the features of ``util_features.py``
(``collect_all_features``, ``load_data_from_model_history``, ``lempel_ziv_complexity``, ``approximate_entropy``,
``get_slope``) as ``run_ours_train_lr.py`` assembles them, and its p-values and their combination
(``percentileofscore(non-members, value) / 100``, then ``-mean`` over the features: "Average" there, "Agg" in
``run_ours_different_agg.py``, the ``signal_agg`` of ``run_ours_get_roc.py``). With ``end`` in (-1, 200, 300)
sliced as Python does (``x[:-1]`` leaves out the last token), the features are, on the plain pass:

- loss ``mean(x[:end])``, ppl ``exp(-loss)``, count_above ``mean(x[:200] >= t)`` for t in (-1, -2, -3),
  lz_complexity (the Lempel-Ziv phrase count per token of ``x[:200]`` binned in 3, 4, 5 levels), token_diversity
  ``len(set(ids[:end])) / len(ids[:end])`` over the ids the model reads, count_mean (how many of ``x[:end]`` exceed
  their mean), calibrated_loss = loss / token_diversity, calibrated_ppl = ppl / token_diversity;
- for each of these but token_diversity, ``overall_diff_1_`` and ``overall_diff_2_``: the feature on the text's
  first copy minus the same on its second (third) copy in the repeated pass, each copy's tokens from the text's
  third on (``labels[2:]``, as the copies may start with other tokens than the text: " The" for "The");
- on the repeated pass's whole sequence r: slope (of a least-squares line through ``r[:end]``) and
  approximate_entropy (m = 8, r = 0.8 std) for end in (600, 800, 1000); on x: count_above_pre, the share of
  tokens t >= 1 of ``x[:end]`` (end in (all, 200, 300)) above the mean of the tokens before them.

Each feature group is oriented so that lower means member (``SIGNS``) before its p-value is taken. Deviations:

- orientation: the public code flips each group whose mean over its MEMBERS is above that over its non-members,
  i.e. it reads the labels of the texts it then scores. That needs labels no user has; here each group's
  direction is fixed (``SIGNS``): the one the paper's reasoning gives (members have higher log-probabilities,
  lower perplexity, lose less on repetition, their repeated loss flattens sooner), which for every group is also
  the one the public rule picks on the built-in model fine-tuned on wikipedia texts (see ``SIGNS``; that is how
  approximate_entropy's was chosen, which no reasoning settles);
- the copies are found as the public code finds them, by the ids of the text from its third token on among the
  repeated pass's ids, the first three occurrences kept (its ``all_si[:-2]`` of six). Where fewer than three
  occur (the first word tokenized otherwise after a space), the public code mixes shifted matches of the first
  copy (or, for members only, retries); here the sought ids lose their first one at a time, at most four, and
  every copy (the first included) is read over the same shorter span; a text whose copies still cannot be found,
  or with fewer than three scored tokens, scores NaN;
- the one id the model reads but never scores (the start token, or with ``--no-prepend-start`` the text's first
  token) is not in the token statistics: token_diversity counts it as an id of its own. That is exact with a
  start token (the default); without one it is off by one id where the text's first token comes back before its
  last;
- a non-member whose feature is undefined (NaN) is left out of that feature's reference; texts longer than the
  model's window are scored in the engine's windows, not the public code's.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.engines.stats import TokenStats
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.recall import refuse_prefix_overlap
from mia_fast.methods.registry import register
from mia_fast.methods.settings import (
    EXAMPLE_NONMEMBERS,
    CheckedSettings,
    ChecksTexts,
    GivesExample,
    MethodSettings,
    known_nonmembers,
)

COPIES = 5  # copies of the text after it in the repeated pass (the public code's num_repeatitions)
COPIES_READ = 3  # the first, second and third copy: the two differences
MAX_SHIFT = 4  # ids dropped at most from the front of the sought copy (as the public code's retries)
ENDS = (-1, 200, 300)  # slice ends of x: -1 leaves out the last token, as the public code's default does
HEAD = 200  # count_above and lz_complexity read x[:200]
THRESHOLDS = (-1.0, -2.0, -3.0)
LZ_BINS = (3, 4, 5)
LZ_EDGES = 100
REPEATED_ENDS = (600, 800, 1000)
APEN_M, APEN_R = 8, 0.8
PRE_MEAN_ENDS = (1_000_000_000, 200, 300)
MIN_TOKENS = 3  # below this the copies and x[:-1] of a copy are empty

# Each group's direction (its overall_diff_ groups share it): +1 where lower means member, -1 where higher does
# (the value is negated). All agree with the public rule on SmolLM2-135M fine-tuned (3 epochs, lr 1e-4) on 40 of
# wikipedia_en texts 100-179 (40 words each), the other 40 its non-members; the AUC of each group's rows there is
# 0.99-1 for loss, ppl, count_above and the calibrated ones, 0.94 slope, 0.79-0.92 lz_complexity, 0.89
# count_above_pre, 0.78 approximate_entropy, 0.67-0.74 count_mean, 0.58-0.59 token_diversity (a property of the
# text alone: no direction on an i.i.d. split; the raw one is kept).
SIGNS = {
    "loss": -1,  # mean log-probability: higher for members
    "ppl": 1,
    "count_above": -1,  # share of confident tokens
    "lz_complexity": 1,  # members' log-probabilities sit near 0: fewer distinct phrases
    "token_diversity": 1,
    "count_mean": -1,  # log-probabilities skew further left of their mean for members: more lie above it
    "calibrated_loss": -1,
    "calibrated_ppl": 1,
    "slope": 1,  # the repeated loss falls from the first copy to the next: less for members
    "approximate_entropy": -1,
    "count_above_pre": -1,  # as count_mean, against the mean of the tokens before
}
SEQUENCE_KEYS = ("loss", "ppl", "count_above", "lz_complexity", "token_diversity", "count_mean")
SEQUENCE_KEYS += ("calibrated_loss", "calibrated_ppl")


@dataclass(frozen=True)
class Repeated:
    """The text followed by ``COPIES`` copies of itself, each after a space."""

    def __call__(self, text: str) -> str:
        return text + f" {text}" * COPIES


REPEATED = Pass(transform=Repeated())


@dataclass(frozen=True)
class CamiaSettings(CheckedSettings, ChecksTexts, GivesExample):
    nonmembers: tuple[str, ...] = known_nonmembers()

    def check_texts(self, texts: Sequence[str]) -> None:
        refuse_prefix_overlap(texts, self.nonmembers, role="non-member reference")

    @classmethod
    def example(cls, model: Any) -> CamiaSettings:
        """The examples' known non-members (two texts: a real reference set holds hundreds)."""
        return cls(nonmembers=EXAMPLE_NONMEMBERS)


def lempel_ziv_complexity(x: np.ndarray, bins: int) -> float:
    """Distinct phrases per value of ``x`` parsed left to right, after binning it on 100 edges from its minimum to 0
    and those bin numbers in ``bins`` levels (the public code's, after github.com/Naereen/Lempel-Ziv_Complexity)."""
    binned = np.digitize(x, bins=np.linspace(x.min(), 0, LZ_EDGES), right=True)
    levels = np.searchsorted(np.linspace(binned.min(), binned.max(), bins + 1)[1:], binned, side="left").tolist()
    phrases: set[tuple[int, ...]] = set()
    start, width, n = 0, 1, len(levels)
    while start + width <= n:
        phrase = tuple(levels[start : start + width])
        if phrase in phrases:
            width += 1
        else:
            phrases.add(phrase)
            start, width = start + width, 1
    return len(phrases) / n


def approximate_entropies(x: np.ndarray, ends: Sequence[int], m: int = APEN_M, r: float = APEN_R) -> np.ndarray:
    """Approximate entropy |phi(m) - phi(m + 1)| of ``x[:end]`` for each end, tolerance r times its standard
    deviation, 0 for a series of at most m + 1 values. The runs of a prefix of x are a leading block of those of x,
    so one matrix of Chebyshev distances between runs serves every end."""
    size = min(max(ends), len(x))
    x = x[:size]
    apart = np.abs(x[:, None] - x[None, :])
    runs = max(size - m + 1, 0)
    shorter = apart[:runs, :runs].copy()
    for offset in range(1, m):
        np.maximum(shorter, apart[offset : offset + runs, offset : offset + runs], out=shorter)
    longer = np.maximum(shorter[:-1, :-1], apart[m:, m:]) if runs > 1 else shorter[:0, :0]

    def phi(distances: np.ndarray, tolerance: float) -> float:
        count = len(distances)
        close = np.sum(distances <= tolerance, axis=0) / count
        return np.sum(np.log(close)) / float(count)

    values = []
    for end in ends:
        n = min(end, size)
        if n <= m + 1:
            values.append(0.0)
            continue
        tolerance = r * np.std(x[:n])
        values.append(abs(phi(shorter[: n - m + 1, : n - m + 1], tolerance) - phi(longer[: n - m, : n - m], tolerance)))
    return np.array(values)


def slopes(r: np.ndarray, ends: Sequence[int]) -> np.ndarray:
    return np.array([np.polyfit(range(len(r[:end])), r[:end], 1)[0] for end in ends])


def above_previous_mean(x: np.ndarray, ends: Sequence[int]) -> np.ndarray:
    """For each end, the share of tokens 1 <= t < min(end, len(x)) whose log-probability exceeds the mean of those
    before it."""
    before = np.cumsum(x)[:-1] / np.arange(1, len(x))
    return np.array([np.mean(x[1 : min(end, len(x))] > before[: min(end, len(x)) - 1]) for end in ends])


def token_diversity(scored_ids: np.ndarray) -> np.ndarray:
    """``len(set(ids[:end])) / len(ids[:end])`` of the ids the model reads: the unscored first one (counted as an
    id of its own) and the scored ones."""
    n = len(scored_ids) + 1
    values = []
    for end in ENDS:
        k = len(range(n)[:end]) - 1
        values.append((len(set(scored_ids[:k].tolist())) + 1) / (k + 1))
    return np.array(values)


def sequence_features(x: np.ndarray, diversity: np.ndarray) -> dict[str, np.ndarray]:
    """The public code's ``collect_all_features`` of one loss sequence (``find_t`` left out, as it leaves it out)."""
    loss = np.array([np.mean(x[:end]) for end in ENDS])
    ppl = np.exp(-loss)
    return {
        "loss": loss,
        "ppl": ppl,
        "count_above": np.array([np.mean(x[:HEAD] >= t) for t in THRESHOLDS]),
        "lz_complexity": np.array([lempel_ziv_complexity(x[:HEAD], bins) for bins in LZ_BINS]),
        "token_diversity": diversity,
        "count_mean": np.array([np.count_nonzero(x[:end] > np.mean(x[:end])) for end in ENDS], dtype=np.float64),
        "calibrated_loss": loss / diversity,
        "calibrated_ppl": ppl / diversity,
    }


def occurrences(haystack: np.ndarray, needle: np.ndarray) -> np.ndarray:
    """Where ``needle`` starts in ``haystack``, in order."""
    if not 0 < len(needle) <= len(haystack):
        return np.zeros(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(haystack, len(needle))
    starts = np.flatnonzero(windows[:, 0] == needle[0])
    return starts[(windows[starts] == needle).all(axis=1)]


def find_copies(scored_ids: np.ndarray, repeated_ids: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The first ``COPIES_READ`` starts, among the repeated pass's scored ids, of the text's ids from its third on
    (scored ids from the second), and their length; the sought ids lose their first one at a time (at most
    ``MAX_SHIFT``) until that many occur. None where they never do."""
    for shift in range(1, MAX_SHIFT + 2):
        sought = scored_ids[shift:]
        if len(sought) < 2:
            return None
        starts = occurrences(repeated_ids, sought)
        if len(starts) >= COPIES_READ:
            return starts[:COPIES_READ], len(sought)
    return None


def text_features(stats: TokenStats, repeated: TokenStats, i: int) -> np.ndarray:
    """The 75 features of text ``i`` in the public code's order (``FEATURES``); NaN where undefined."""
    x = stats.logp[stats.offsets[i] : stats.offsets[i + 1]].astype(np.float64)
    ids = stats.target_ids[stats.offsets[i] : stats.offsets[i + 1]]
    r = repeated.logp[repeated.offsets[i] : repeated.offsets[i + 1]].astype(np.float64)
    r_ids = repeated.target_ids[repeated.offsets[i] : repeated.offsets[i + 1]]
    if len(x) < MIN_TOKENS:
        return np.full(len(FEATURES), np.nan)
    diversity = token_diversity(ids)
    single = sequence_features(x, diversity)
    found = find_copies(ids, r_ids)
    copies = [sequence_features(r[s : s + found[1]], diversity) for s in found[0]] if found else None
    values = []
    for key in SEQUENCE_KEYS:
        values.append(single[key])
        if key == "token_diversity":
            continue
        for k in (1, 2):
            values.append(copies[0][key] - copies[k][key] if copies else np.full(len(ENDS), np.nan))
    values.append(slopes(r, REPEATED_ENDS))
    values.append(approximate_entropies(r, REPEATED_ENDS))
    values.append(above_previous_mean(x, PRE_MEAN_ENDS))
    return np.concatenate(values)


def _groups() -> list[str]:
    groups = []
    for key in SEQUENCE_KEYS:
        groups += [key] if key == "token_diversity" else [key, f"overall_diff_1_{key}", f"overall_diff_2_{key}"]
    return groups + ["slope", "approximate_entropy", "count_above_pre"]


GROUPS = _groups()
FEATURES = [f"{group}_{j}" for group in GROUPS for j in range(3)]  # the public code's names: group, row


def _sign(group: str) -> int:
    return SIGNS[group.removeprefix("overall_diff_1_").removeprefix("overall_diff_2_")]


ORIENTATION = np.repeat([_sign(group) for group in GROUPS], 3).astype(np.float64)


def camia_features(inputs: ScoringInputs) -> np.ndarray:
    """The raw (unoriented) features of each text: float64 [texts, 75], columns ``FEATURES``."""
    stats, repeated = inputs.stats, inputs.of(REPEATED)
    with np.errstate(invalid="ignore", divide="ignore"):
        rows = [text_features(stats, repeated, i) for i in range(len(stats))]
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


# The features of each calibration set by its passes' results, which the detector runs once and keeps: the
# non-members' features are then computed once too, not again for every block of texts scored against them.
_KNOWN_FEATURES: dict[tuple[int, int], tuple[weakref.ref, weakref.ref, np.ndarray]] = {}


def known_features(inputs: ScoringInputs) -> np.ndarray:
    """``camia_features`` of a calibration set, computed once for the same results of its passes (read-only)."""
    stats, repeated = inputs.stats, inputs.of(REPEATED)
    key = (id(stats), id(repeated))
    held = _KNOWN_FEATURES.get(key)
    if held is not None and held[0]() is stats and held[1]() is repeated:
        return held[2]
    features = camia_features(inputs)
    features.flags.writeable = False
    forget = _forgetter(key)
    _KNOWN_FEATURES[key] = (weakref.ref(stats, forget), weakref.ref(repeated, forget), features)
    return features


def _forgetter(key: tuple[int, int]):
    def forget(gone: weakref.ref) -> None:
        held = _KNOWN_FEATURES.get(key)
        if held is not None and any(ref is gone for ref in held[:2]):
            _KNOWN_FEATURES.pop(key, None)

    return forget


def percentile_ranks(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``scipy.stats.percentileofscore(reference, values) / 100`` (kind 'rank': the mean of the shares of the
    reference below and at or below each value, a tie counting one more), NaN values of the reference left out;
    NaN for a NaN value or an empty reference."""
    reference = np.sort(reference[~np.isnan(reference)])
    if not len(reference):
        return np.full(len(values), np.nan)
    left = np.searchsorted(reference, values, side="left")
    right = np.searchsorted(reference, values, side="right")
    ranks = (left + right + (left < right)) * (50.0 / len(reference)) / 100
    return np.where(np.isnan(values), np.nan, ranks)


def combined_pvalues(features: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Minus the mean over the features of each text's p-value among the non-members' (both oriented first)."""
    oriented, known = features * ORIENTATION, reference * ORIENTATION
    pvalues = np.array([percentile_ranks(oriented[:, j], known[:, j]) for j in range(len(FEATURES))])
    return -pvalues.mean(axis=0)


def camia_nonmembers(settings: MethodSettings) -> tuple[str, ...]:
    return settings.of(CamiaSettings).nonmembers


@register(
    "camia",
    settings=[CamiaSettings],
    passes=lambda settings: (PLAIN, REPEATED),
    calibration=camia_nonmembers,
)
def camia_score(inputs: ScoringInputs) -> np.ndarray:
    """CAMIA: minus the mean p-value, among known non-members, of 75 features of the loss sequence and its repeat."""
    reference = inputs.calibration[camia_nonmembers(inputs.settings)]
    return combined_pvalues(camia_features(inputs), known_features(reference))
