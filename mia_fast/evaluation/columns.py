"""The score columns of a report: ranked by AUROC, the k-methods' families (``{family}_{k}``) each shown at its best
k, and the mark of a model-free baseline."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.metrics import MethodMetrics

_K_COLUMN = re.compile(r"^(?P<family>.+)_(?P<k>\d+\.\d+)$")
# Marks a model-free baseline in tables and figures; a footnote says so.
MODEL_FREE = "*"
MODEL_FREE_NOTE = "* model-free baseline: a classifier of the texts alone, scored out of fold (no model involved)"


def ranked(results: Mapping[str, MethodMetrics]) -> list[tuple[str, MethodMetrics]]:
    return sorted(results.items(), key=lambda item: -item[1].auroc)


def k_families(names: Sequence[str]) -> dict[str, list[tuple[float, str]]]:
    """The k-methods among score columns: family -> [(k, column)], k ascending."""
    families: dict[str, list[tuple[float, str]]] = {}
    for name in names:
        match = _K_COLUMN.match(name)
        if match:
            families.setdefault(match["family"], []).append((float(match["k"]), name))
    return {family: sorted(columns) for family, columns in families.items()}


def shown_columns(results: Mapping[str, MethodMetrics]) -> list[str]:
    """Every column but the k-methods' other k: each family appears at its best k. Best AUROC first."""
    others = {column for columns in k_families(list(results)).values() for _, column in columns}
    best = {
        max((c for _, c in columns), key=lambda c: results[c].auroc) for columns in k_families(list(results)).values()
    }
    return [name for name, _ in ranked(results) if name not in others or name in best]


def display_name(name: str) -> str:
    return name + MODEL_FREE if name in BLIND_COLUMNS else name
