"""Two reports side by side: per method in both, AUROC and TPR@1%FPR and their difference, with a warning for each
difference in what the reports were made from or with."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.evaluation import metrics
from mia_fast.evaluation.report import load_metrics, number_cell

# Meta entries that say where a report's scores went, what it took or how its fine-tuning went: not what it measured.
_INCIDENTAL_META = re.compile(r"^(scores|python|seconds_.*|first_loss|last_loss)$")


def _differences(first: Mapping[str, Any], second: Mapping[str, Any], shared: str) -> list[str]:
    """What makes the numbers of two loaded reports (:func:`load_metrics`) incomparable: each setting their meta
    records differently (data, model, methods, k, ...), and the rows their methods (``shared`` among them) were
    measured on."""
    meta_a, meta_b = first["meta"], second["meta"]
    differences = [
        f"{key} (A: {_recorded(meta_a, key)}; B: {_recorded(meta_b, key)})"
        for key in dict.fromkeys([*meta_a, *meta_b])
        if not _INCIDENTAL_META.match(key) and meta_a.get(key) != meta_b.get(key)
    ]
    rows_a, rows_b = (_rows(report["methods"][shared]) for report in (first, second))
    if rows_a != rows_b:
        differences.append(f"the rows scored (A: {rows_a}; B: {rows_b})")
    return differences


def _recorded(meta: Mapping[str, Any], key: str) -> str:
    return repr(meta[key]) if key in meta else "not recorded"


def _rows(result: Mapping[str, Any]) -> str:
    return (
        f"{result.get('n_members')} members, {result.get('n_nonmembers')} non-members, "
        f"{result.get('n_excluded')} excluded"
    )


def compare_reports(first: str | Path, second: str | Path) -> str:
    """Per method in both reports: AUROC and TPR@1%FPR of each and their difference (second − first). Each
    difference in what the reports were made from or with is a warning (:class:`MiaFastWarning`): their deltas
    then measure that difference too."""
    loaded_a, loaded_b = load_metrics(first), load_metrics(second)
    a, b = loaded_a["methods"], loaded_b["methods"]
    shared = [name for name in b if name in a]
    if not shared:
        raise MiaFastError(f"{first} and {second} share no method")
    for difference in _differences(loaded_a, loaded_b, shared[0]):
        warnings.warn(f"the reports are not comparable: they differ in {difference}", MiaFastWarning, stacklevel=2)
    header = f"{'method':<16} {'AUROC A':>8} {'AUROC B':>8} {'Δ':>7}   {'TPR@1% A':>9} {'TPR@1% B':>9} {'Δ':>7}"
    lines = [f"A = {first}", f"B = {second}", header, "-" * len(header)]
    for name in sorted(shared, key=lambda n: -np.nan_to_num(b[n]["auroc"], nan=-1)):
        ra, rb = a[name], b[name]
        ta, tb = ra["tpr_at_fpr"]["1%"], rb["tpr_at_fpr"]["1%"]
        lines.append(
            f"{name:<16} {ra['auroc']:>8.3f} {rb['auroc']:>8.3f} {rb['auroc'] - ra['auroc']:>+7.3f}   "
            f"{number_cell(ta, 9)} {number_cell(tb, 9)} {number_cell(tb - ta, 7, '+')}"
        )
    unresolved = [
        label
        for label, report in (("A", a), ("B", b))
        if any(math.isnan(report[n]["tpr_at_fpr"]["1%"]) for n in shared)
    ]
    if unresolved:
        lines.append(
            f"n/a: TPR@1%FPR needs ≥ {metrics.nonmembers_needed(0.01)} non-members ({' and '.join(unresolved)} "
            "had fewer)"
        )
    for label, only in (("only in A", [n for n in a if n not in b]), ("only in B", [n for n in b if n not in a])):
        if only:
            lines.append(f"{label}: {', '.join(only)}")
    return "\n".join(lines)
