"""From score columns and labels to what a report states: the blind baselines fitted and tested on the rows every
method scored, the metrics of every column, and the verdicts, each with its minimum detectable AUROC. What
``eval`` and the demo share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS, BlindBaselines, blind_baselines
from mia_fast.evaluation.columns import shown_columns
from mia_fast.evaluation.verdicts import KnownLeak, Verdict, all_verdicts


@dataclass(frozen=True)
class BlindSettings:
    """Whether the blind baselines run beside the methods, and the most label shuffles their refit test draws
    (None: by the sample's size, :func:`~mia_fast.evaluation.blind_refit.refit_permutations`)."""

    enabled: bool = True
    permutations: int | None = None


@dataclass(frozen=True)
class Assessment:
    columns: dict[str, np.ndarray]  # the methods' scores and the blind baselines' (NaN on rows left out)
    results: dict[str, metrics.MethodMetrics]
    blind: BlindBaselines | None
    verdicts: list[Verdict]


def assess(
    texts: Sequence[str],
    labels: Sequence,
    columns: Mapping[str, np.ndarray],
    resamples: int = metrics.BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    blind: BlindSettings = BlindSettings(),
    known: KnownLeak | None = None,
    *,
    progress: bool = False,
) -> Assessment:
    """Fits the blind baselines (``blind``) on the rows every column scored, evaluates every column (the baselines
    with their refit p-values) and states the verdicts; ``known`` is the suite's leak on record."""
    labels = metrics.check_labels(labels)
    columns = {name: np.asarray(values, dtype=np.float64) for name, values in columns.items()}
    found = None
    given = {}
    if blind.enabled:
        scored = (
            np.logical_and.reduce([~np.isnan(v) for v in columns.values()])
            if columns
            else np.ones(len(labels), dtype=bool)
        )
        rows = np.flatnonzero(scored)
        found = blind_baselines(
            [texts[i] for i in rows], labels[rows], seed=seed, permutations=blind.permutations, progress=progress
        )
        for name, values in found.scores.items():
            columns[name] = np.full(len(labels), np.nan)
            columns[name][rows] = values
        given = {name: test.p_value for name, test in found.tests.items()}
    results = metrics.evaluate(
        labels, columns, resamples=resamples, seed=seed, baselines=BLIND_COLUMNS, permutation_p=given
    )
    tests = found.tests if found else None
    telltales = found.telltales if found else ()
    verdicts = all_verdicts(results, shown_columns(results), tests, telltales, known)
    return Assessment(columns, results, found, verdicts)
