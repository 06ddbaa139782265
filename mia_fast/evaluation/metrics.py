"""Detection metrics: AUROC, ROC curve, TPR at low FPR, paired bootstrap confidence intervals, a permutation
control.

Labels are 1 for a member and 0 for a non-member; higher scores mean member. The ROC curve
reproduces ``sklearn.metrics.roc_curve`` (with its default ``drop_intermediate=True``), and
TPR@x%FPR is ``tpr[last index where fpr <= x]`` on it, the Min-K%++ code's convention. With n
non-members the smallest non-zero FPR is 1/n, so TPR@x%FPR is reported only where n >= 1/x: below
that it would be the TPR at FPR 0, whatever x says, and it is None (n/a) with the reason.

The permutation control asks how often shuffled labels give an AUROC at least as high: the same
seeded permutations for every column, only the metric recomputed (no model run).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from mia_fast.errors import MiaFastError

FPR_LEVELS: tuple[float, ...] = (0.001, 0.01, 0.05)
BOOTSTRAP_RESAMPLES = 1000
PERMUTATIONS = 1000
SIGNIFICANCE = 0.05
# Bounds the [resamples x n] matrices built per bootstrap or permutation chunk.
_CHUNK_CELLS = 20_000_000


def check_labels(labels: Sequence) -> np.ndarray:
    """Returns labels as an int8 array, refusing anything but 0/1 and a single class."""
    array = np.asarray(labels)
    if array.dtype == bool:
        array = array.astype(np.int8)
    valid = np.isin(array, (0, 1)) if array.dtype.kind in "iuf" else np.zeros(len(array), dtype=bool)
    if not valid.all():
        bad = array[~valid][0].item()
        raise MiaFastError(f"labels must be 0 (non-member) or 1 (member); found {bad!r}")
    array = array.astype(np.int8)
    if array.min(initial=1) == array.max(initial=0):
        which = "members" if array.size and array[0] == 1 else "non-members"
        raise MiaFastError(f"AUROC is undefined: the labelled rows are all {which} (need both classes)")
    return array


def roc_curve(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) exactly as ``sklearn.metrics.roc_curve(labels, scores)``."""
    labels = np.asarray(labels, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")[::-1]
    scores, labels = scores[order], labels[order]
    distinct = np.where(np.diff(scores))[0]
    threshold_idx = np.r_[distinct, labels.size - 1]
    tps = np.cumsum(labels)[threshold_idx]
    fps = 1 + threshold_idx - tps
    thresholds = scores[threshold_idx]
    if len(fps) > 2:
        keep = np.where(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])[0]
        fps, tps, thresholds = fps[keep], tps[keep], thresholds[keep]
    tps, fps = np.r_[0, tps], np.r_[0, fps]
    thresholds = np.r_[np.inf, thresholds]
    return fps / fps[-1], tps / tps[-1], thresholds


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve; ties count one half (Mann-Whitney U with mid-ranks)."""
    labels = np.asarray(labels)
    weights = np.ones((1, len(labels)))
    return float(_weighted_auroc(labels, np.asarray(scores, dtype=np.float64), weights)[0])


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    return float(tpr[np.where(fpr <= level)[0][-1]])


def nonmembers_needed(level: float) -> int:
    """The fewest non-members whose smallest non-zero FPR, 1/n, is at most ``level``."""
    return math.ceil(round(1 / level, 9))


def missing_tpr_reason(level: float, n_nonmembers: int) -> str | None:
    """Why TPR at this FPR is not reported for ``n_nonmembers``; None when it is."""
    needed = nonmembers_needed(level)
    if n_nonmembers >= needed:
        return None
    return (
        f"needs >= {needed:,} non-members; with {n_nonmembers:,} the smallest non-zero FPR is 1/{n_nonmembers:,}, "
        "so this would be the TPR at FPR 0"
    )


def fpr_at_tpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    return float(fpr[np.where(tpr >= level)[0][0]])


def _weighted_auroc(labels: np.ndarray, scores: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """AUROC for each row of ``weights`` [R, n] (a row of resample counts), ties counting 1/2."""
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    group_starts = np.r_[0, np.where(np.diff(sorted_scores))[0] + 1]
    positive = (labels[order] == 1)[None, :]
    w = weights[:, order]
    pos_per_group = np.add.reduceat(np.where(positive, w, 0.0), group_starts, axis=1)
    neg_per_group = np.add.reduceat(np.where(positive, 0.0, w), group_starts, axis=1)
    neg_below = np.cumsum(neg_per_group, axis=1) - neg_per_group
    wins = (pos_per_group * (neg_below + 0.5 * neg_per_group)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return wins / (pos_per_group.sum(axis=1) * neg_per_group.sum(axis=1))


def bootstrap_auroc(
    labels: np.ndarray,
    columns: Mapping[str, np.ndarray],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """AUROC of every column on the same (paired) seeded resamples of the rows.

    Resamples that miss a class give NaN and are ignored by :func:`confidence_interval`.
    """
    labels = np.asarray(labels)
    n = len(labels)
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(n, 1))
    draws: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        picks = rng.integers(0, n, size=(rows, n)) + (np.arange(rows) * n)[:, None]
        weights = np.bincount(picks.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float64)
        for name, scores in columns.items():
            draws[name].append(_weighted_auroc(labels, np.asarray(scores, dtype=np.float64), weights))
    return {name: np.concatenate(parts) for name, parts in draws.items()}


def confidence_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the resamples that are defined; (NaN, NaN) when none is (every resample of a tiny
    group missed a class)."""
    samples = np.asarray(samples, dtype=np.float64)
    if np.isnan(samples).all():
        return float("nan"), float("nan")
    tail = (1 - level) / 2 * 100
    low, high = np.nanpercentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def permutation_pvalues(
    labels: np.ndarray, columns: Mapping[str, np.ndarray], permutations: int = PERMUTATIONS, seed: int = 0
) -> dict[str, float]:
    """One-sided permutation p-value of every column's AUROC: (1 + #{shuffles with AUROC >= the observed}) /
    (1 + permutations), the same seeded shuffles for every column. The smallest possible is 1/(1 + permutations)."""
    from scipy.stats import rankdata  # noqa: PLC0415 (scipy: slow at start-up; only the permutation test needs it)

    labels = np.asarray(labels)
    n, members = len(labels), int(labels.sum())
    ranks = {name: rankdata(np.asarray(s, dtype=np.float64)) for name, s in columns.items()}
    # AUROC = (rank sum of the members - m(m+1)/2) / (m (n-m)): compare rank sums, halves summed exactly.
    observed = {name: r[labels == 1].sum() for name, r in ranks.items()}
    at_least = dict.fromkeys(columns, 0)
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, permutations, chunk):
        rows = min(chunk, permutations - start)
        picked = rng.permuted(np.tile(np.arange(n), (rows, 1)), axis=1)[:, :members]
        for name, r in ranks.items():
            at_least[name] += int((r[picked].sum(axis=1) >= observed[name]).sum())
    return {name: (1 + at_least[name]) / (1 + permutations) for name in columns}


def holm_rejections(pvalues: Mapping[str, float], alpha: float = SIGNIFICANCE) -> set[str]:
    """The names whose null hypotheses Holm's step-down procedure rejects at family-wise level ``alpha``."""
    rejected = set()
    for rank, (name, p) in enumerate(sorted(pvalues.items(), key=lambda item: item[1])):
        if p > alpha / (len(pvalues) - rank):
            break
        rejected.add(name)
    return rejected


@dataclass(frozen=True)
class Significance:
    """The permutation control's one-sided p-value, and the paired-bootstrap 95% CI of this AUROC minus the best
    baseline's (None for a baseline, or without one)."""

    permutation_p: float = math.nan
    over_baseline_ci: tuple[float, float] | None = None


@dataclass(frozen=True)
class MethodMetrics:
    auroc: float
    auroc_ci: tuple[float, float]
    tpr_at_fpr: dict[str, float | None]  # None: too few non-members to resolve that FPR (missing_tpr_reason)
    fpr_at_95tpr: float
    n_members: int
    n_nonmembers: int
    n_excluded: int  # rows whose score is NaN (e.g. empty texts)
    significance: Significance = Significance()

    def to_dict(self) -> dict:
        result = asdict(self)
        missing = {
            fpr_key(level): missing_tpr_reason(level, self.n_nonmembers)
            for level in FPR_LEVELS
            if fpr_key(level) in self.tpr_at_fpr and self.tpr_at_fpr[fpr_key(level)] is None
        }
        if missing:
            result["tpr_at_fpr_missing"] = missing
        return result


def fpr_key(level: float) -> str:
    return f"{level * 100:g}%"


def evaluate(
    labels: Sequence,
    columns: Mapping[str, np.ndarray],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
    baselines: Collection[str] = (),
    permutation_p: Mapping[str, float] | None = None,
) -> dict[str, MethodMetrics]:
    """Metrics of every score column against 0/1 labels, with a permutation p-value per column and, for every
    column not among ``baselines``, the paired-bootstrap CI of its AUROC minus the best baseline's.

    ``permutation_p`` gives the p-values of columns tested otherwise: a column fitted on the labels (a blind
    baseline) is tested by refitting it on each shuffle, which shuffling over its fixed scores would not be.

    Rows where any score is NaN (e.g. empty texts) are left out of every method, so that all
    methods are compared on the same rows and the bootstrap resamples are paired.
    """
    labels = check_labels(labels)
    matrix = {name: np.asarray(scores, dtype=np.float64) for name, scores in columns.items()}
    finite = np.logical_and.reduce([~np.isnan(s) for s in matrix.values()]) if matrix else np.ones(0, bool)
    for value, which in ((1, "member"), (0, "non-member")):
        if not (labels[finite] == value).any():
            raise MiaFastError(
                f"AUROC is undefined: all {int((labels == value).sum())} {which} rows were excluded as unscorable "
                "(a score is NaN: an empty or blank text, or one the model could not score); both classes need "
                "scored rows"
            )
    y = labels[finite]
    kept = {name: s[finite] for name, s in matrix.items()}
    samples = bootstrap_auroc(y, kept, resamples=resamples, seed=seed)
    given = dict(permutation_p or {})
    shuffled = {name: s for name, s in kept.items() if name not in given}
    pvalues = permutation_pvalues(y, shuffled, permutations=permutations, seed=seed) | given
    aurocs = {name: auroc(y, s) for name, s in kept.items()}
    present = [name for name in kept if name in baselines]
    best_baseline = max(present, key=aurocs.__getitem__) if present else None
    n_nonmembers = int(len(y) - y.sum())
    results: dict[str, MethodMetrics] = {}
    for name, s in kept.items():
        fpr, tpr, _ = roc_curve(y, s)
        results[name] = MethodMetrics(
            auroc=aurocs[name],
            auroc_ci=confidence_interval(samples[name]),
            tpr_at_fpr={
                fpr_key(level): None if missing_tpr_reason(level, n_nonmembers) else tpr_at_fpr(fpr, tpr, level)
                for level in FPR_LEVELS
            },
            fpr_at_95tpr=fpr_at_tpr(fpr, tpr, 0.95),
            n_members=int(y.sum()),
            n_nonmembers=n_nonmembers,
            n_excluded=int((~finite).sum()),
            significance=Significance(
                pvalues[name],
                None
                if best_baseline is None or name in baselines
                else confidence_interval(samples[name] - samples[best_baseline]),
            ),
        )
    return results


def evaluate_by_group(
    labels: Sequence,
    columns: Mapping[str, np.ndarray],
    groups: Sequence[str],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    permutations: int = PERMUTATIONS,
    untested: Collection[str] = (),
) -> dict[str, dict[str, MethodMetrics]]:
    """:func:`evaluate` within each group (e.g. a length bucket) that holds both classes, in order of first
    appearance; the ``untested`` columns (fitted on the labels, so that shuffles over their fixed scores test
    nothing) get no permutation p-value (NaN)."""
    labels, groups = np.asarray(labels), np.asarray(groups)
    results = {}
    for group in dict.fromkeys(groups.tolist()):
        inside = groups == group
        if len(set(labels[inside].tolist())) == 2:
            results[group] = evaluate(
                labels[inside],
                {c: v[inside] for c, v in columns.items()},
                resamples=resamples,
                seed=seed,
                permutations=permutations,
                permutation_p=dict.fromkeys(untested, math.nan),
            )
    return results
