"""Model-free ("blind") baselines: can a benchmark's members be told from its non-members without the model?

Das et al. ("Blind Baselines Beat Membership Inference Attacks for Foundation Models", 2024) separate
WikiMIA's members from its non-members at AUROC 0.99 with a bag-of-words classifier, and other
benchmarks with a date detector: the splits leak through topics and dates, so a method's AUROC on
them is no evidence of membership. Three classifiers here (``blind_bow``, ``blind_dates``, ``blind_ngrams``): the
texts are read once (``blind_features.py``), each baseline is scored out of fold (``blind_fits.py``) and tested by
refitting it on shuffled labels (``blind_refit.py``); this module runs all of it for one sample, and the telltales.

Telltales, the n-grams that give members away, are checked held out: an n-gram picked among the first steps on a
fold's training rows is counted on that fold's held-out rows, and named only where those counts favour members
(Fisher's exact test, one-sided, at ``metrics.SIGNIFICANCE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind_features import BlindFeatures
from mia_fast.evaluation.blind_fits import (
    DEFAULT_FOLDS,
    GreedySelection,
    Splits,
    bow_scores,
    date_scores,
    fold_splits,
    ngram_selections,
    selection_scores,
)
from mia_fast.evaluation.blind_refit import RefitTest, refit_permutation_tests, refit_permutations

BLIND_COLUMNS = ("blind_bow", "blind_dates", "blind_ngrams")
TELLTALES = 3


@dataclass(frozen=True)
class Telltale:
    """An n-gram that gives members away, counted held out: over the ``folds`` whose training rows picked it among
    their first steps, how many of those folds' held-out members and non-members hold it, and Fisher's one-sided
    exact p-value that members hold it more often."""

    ngram: str
    members: int
    nonmembers: int
    held_out_members: int
    held_out_nonmembers: int
    folds: int
    p_value: float


def _checked_telltales(
    features: BlindFeatures, labels: np.ndarray, splits: Splits, selections: Sequence[GreedySelection], top: int
) -> list[Telltale]:
    """The n-grams among each fold's first ``top`` picks whose held-out counts favour members (Fisher's exact test,
    one-sided, at the report's significance level), strongest first."""
    from scipy.stats import fisher_exact  # noqa: PLC0415 (scipy: slow at start-up; only the blind baselines need it)

    folds_of: dict[int, list[int]] = {}
    for fold, selection in enumerate(selections):
        for column in selection.columns[:top]:
            folds_of.setdefault(int(column), []).append(fold)
    found = []
    for column, folds in folds_of.items():
        held_out = np.concatenate([splits[fold][1] for fold in folds])
        holding = features.ngrams[held_out, column].toarray().ravel() > 0
        members, nonmembers = labels[held_out] == 1, labels[held_out] == 0
        counts = int(holding[members].sum()), int(holding[nonmembers].sum())
        table = [[counts[0], int(members.sum()) - counts[0]], [counts[1], int(nonmembers.sum()) - counts[1]]]
        p = float(fisher_exact(table, alternative="greater").pvalue)
        if p < metrics.SIGNIFICANCE:
            name = str(features.ngram_names[column])
            found.append(Telltale(name, *counts, int(members.sum()), int(nonmembers.sum()), len(folds), p))
    return sorted(found, key=lambda t: (t.p_value, -t.folds, t.ngram))[:top]


def telltale_ngrams(
    texts: Sequence[str], labels: Sequence[int], top: int = TELLTALES, folds: int = DEFAULT_FOLDS, seed: int = 0
) -> list[Telltale]:
    """The n-grams that give members away, each picked on training folds and confirmed on the held-out ones."""
    labels = np.asarray(labels, dtype=np.int64)
    features = BlindFeatures.of(texts)
    splits = fold_splits(labels, folds, seed)
    return _checked_telltales(features, labels, splits, ngram_selections(features, labels, splits), top)


@dataclass(frozen=True)
class BlindBaselines:
    scores: dict[str, np.ndarray]  # column -> out-of-fold score of every text
    telltales: list[Telltale]  # checked held out; named in a verdict only where a baseline is significant
    tests: dict[str, RefitTest]  # column -> its refit permutation test (empty without one)


def blind_scores(
    texts: Sequence[str], labels: Sequence[int], folds: int = DEFAULT_FOLDS, seed: int = 0
) -> dict[str, np.ndarray]:
    """Out-of-fold member scores of the three blind baselines (the classifiers' decision values; the greedy
    selection's step score)."""
    return blind_baselines(texts, labels, folds, seed, permutations=0).scores


def blind_baselines(
    texts: Sequence[str],
    labels: Sequence[int],
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    telltales: int = TELLTALES,
    permutations: int | None = None,
    *,
    progress: bool = False,
) -> BlindBaselines:
    """Out-of-fold scores of the three baselines, their held-out telltales and their refit permutation tests
    (``permutations``: the most shuffles per baseline, default :func:`refit_permutations`; 0: no test), the texts
    read once. ``progress`` shows a bar over the shuffles."""
    labels = np.asarray(labels, dtype=np.int64)
    if len(texts) != len(labels):
        raise MiaFastError(f"{len(texts)} texts but {len(labels)} labels")
    splits = fold_splits(labels, folds, seed)
    features = BlindFeatures.of(texts)
    selections = ngram_selections(features, labels, splits)
    scores = {
        "blind_bow": bow_scores(features, labels, splits, seed),
        "blind_dates": date_scores(features, labels, splits, seed),
        "blind_ngrams": selection_scores(features, splits, selections),
    }
    found = _checked_telltales(features, labels, splits, selections, telltales)
    if permutations == 0:
        return BlindBaselines(scores, found, {})
    from tqdm.auto import tqdm  # noqa: PLC0415 (0.14 s at start-up; only the refit tests show a bar)

    most = refit_permutations(len(labels)) if permutations is None else permutations
    observed = {column: metrics.auroc(labels, values) for column, values in scores.items()}
    with tqdm(total=most, desc="blind baselines, refit shuffles", unit="shuffle", disable=not progress) as bar:
        tests = refit_permutation_tests(features, labels, observed, folds, seed, most, on_permutation=bar.update)
        bar.total = bar.n  # a split at chance stops early: done, not cut short
        bar.refresh()
    return BlindBaselines(scores, found, tests)


def leaking_baselines(results: Mapping[str, metrics.MethodMetrics]) -> set[str]:
    """The blind baselines whose (refit) permutation p-values Holm's procedure rejects over the baselines present."""
    return metrics.holm_rejections({n: r.significance.permutation_p for n, r in results.items() if n in BLIND_COLUMNS})
