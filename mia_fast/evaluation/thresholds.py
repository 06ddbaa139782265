"""Decision thresholds for audits (Min-K% Prob, §5.1): pick one on a labelled validation set, apply it
to new texts, and report per document group (e.g. per book) the share of snippets flagged as members.

A text is flagged when its score is at or above the threshold (scores are oriented so that higher
means member). Two rules pick the threshold: the best validation accuracy, or the highest TPR whose
validation FPR stays at or below a target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import read_checked_json, replacing, write_atomic, write_checked_json
from mia_fast.errors import MiaFastError

RULES = ("accuracy", "fpr")
_FORMAT = "mia-fast threshold v2"
_WRITER = "mia-fast calibrate"
# JSON has no infinity: a threshold of +inf (flag nothing) or -inf (flag every scored text) is written as a string.
_INFINITIES = {"inf": math.inf, "-inf": -math.inf}


def _json_number(value: float) -> float | str:
    """``value`` as JSON holds it: an infinity as "inf" or "-inf"."""
    return ("inf" if value > 0 else "-inf") if math.isinf(value) else value


def _from_json_number(value: Any) -> Any:
    """The inverse of :func:`_json_number`; anything else is returned as it is."""
    return _INFINITIES.get(value, value) if isinstance(value, str) else value


@dataclass(frozen=True)
class Threshold:
    method: str
    value: float
    rule: str
    target_fpr: float | None
    validation: dict[str, float]  # accuracy, tpr, fpr, members, non-members at this threshold
    settings: dict[str, Any] = field(default_factory=dict)  # model and scoring options it was calibrated with

    def save(self, path: str | Path) -> Path:
        return write_checked_json(path, {**asdict(self), "value": _json_number(self.value)}, _FORMAT)

    @classmethod
    def load(cls, path: str | Path) -> Threshold:
        data = read_checked_json(path, _FORMAT, _WRITER)
        data["value"] = _from_json_number(data.get("value"))
        try:
            threshold = cls(**data)
        except TypeError as exc:
            raise MiaFastError(f"{path}: malformed threshold file ({exc}); {_WRITER} writes one") from None
        if threshold.rule not in RULES or not isinstance(threshold.value, (int, float)):
            raise MiaFastError(f"{path}: malformed threshold file (rule {threshold.rule!r}, value {threshold.value!r})")
        return threshold

    def check_use(self, source: str, settings: Mapping[str, Any], column: str | None = None) -> None:
        """A threshold applies only to its own score column (``column``, when given), computed under the settings it
        was calibrated with."""
        if column is not None and column != self.method:
            raise MiaFastError(f"{source} is a threshold for {self.method}, not {column}; calibrate one for {column}")
        mismatched = {
            k: (self.settings[k], v) for k, v in settings.items() if k in self.settings and self.settings[k] != v
        }
        if mismatched:
            details = ", ".join(f"{k}: calibrated with {a!r}, now {b!r}" for k, (a, b) in mismatched.items())
            raise MiaFastError(
                f"{source} was calibrated under other scoring settings ({details}); scores would not be comparable"
            )


def calibrate(
    labels: Sequence[int],
    scores: Sequence[float],
    method: str,
    rule: str = "accuracy",
    target_fpr: float | None = None,
    settings: dict[str, Any] | None = None,
) -> Threshold:
    """The threshold on ``scores`` that maximises validation accuracy (``rule="accuracy"``) or TPR
    subject to FPR <= ``target_fpr`` (``rule="fpr"``). Unscorable (NaN) rows are left out."""
    check_rule(rule, target_fpr)
    labels, scores = np.asarray(labels), np.asarray(scores, dtype=np.float64)
    keep = ~np.isnan(scores)
    labels, scores = labels[keep], scores[keep]
    members, nonmembers = require_both_classes(labels)
    # Candidate thresholds: every distinct score, high to low, plus +inf (flag nothing).
    candidates = np.r_[np.inf, np.unique(scores)[::-1]]
    tp = members - np.searchsorted(np.sort(scores[labels == 1]), candidates, side="left")
    fp = nonmembers - np.searchsorted(np.sort(scores[labels == 0]), candidates, side="left")
    tpr, fpr = tp / members, fp / nonmembers
    accuracy = (tp + nonmembers - fp) / (members + nonmembers)
    if rule == "accuracy":
        best = int(np.argmax(accuracy))  # the highest threshold among equals: fewest flags
    else:
        allowed = np.where(fpr <= target_fpr)[0]
        best = int(allowed[np.argmax(tpr[allowed])])
    validation = {
        "accuracy": float(accuracy[best]),
        "tpr": float(tpr[best]),
        "fpr": float(fpr[best]),
        "members": members,
        "nonmembers": nonmembers,
    }
    return Threshold(method, float(candidates[best]), rule, target_fpr, validation, dict(settings or {}))


def check_rule(rule: str, target_fpr: float | None) -> None:
    """Refuses an unknown rule, or the fpr rule without a target FPR in [0, 1)."""
    if rule not in RULES:
        raise MiaFastError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    if rule == "fpr" and not (target_fpr is not None and 0 <= target_fpr < 1):
        raise MiaFastError(f"the fpr rule needs a target FPR in [0, 1), got {target_fpr}")


def require_both_classes(labels: Sequence[int]) -> tuple[int, int]:
    """(members, non-members) of a validation set; an error when either is missing."""
    labels = np.asarray(labels)
    members, nonmembers = int((labels == 1).sum()), int((labels == 0).sum())
    if members == 0 or nonmembers == 0:
        which = "members" if members == 0 else "non-members"
        raise MiaFastError(f"the validation set has no {which} (with a score); a threshold needs both")
    return members, nonmembers


def flag(scores: Sequence[float], threshold: Threshold) -> np.ndarray:
    """True where a score is at or above the threshold (NaN scores are not flagged)."""
    scores = np.asarray(scores, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return scores >= threshold.value


def contamination_rates(groups: Sequence[str], flags: np.ndarray, scored: np.ndarray) -> list[dict[str, Any]]:
    """Per group: snippets, scored snippets, flagged snippets and the flagged share of the scored ones,
    highest share first."""
    rates: dict[str, dict[str, Any]] = {}
    for group, flagged, ok in zip(groups, flags, scored):
        entry = rates.setdefault(str(group), {"group": str(group), "snippets": 0, "scored": 0, "flagged": 0})
        entry["snippets"] += 1
        entry["scored"] += int(ok)
        entry["flagged"] += int(bool(flagged) and ok)
    for entry in rates.values():
        entry["rate"] = entry["flagged"] / entry["scored"] if entry["scored"] else float("nan")
    return sorted(rates.values(), key=lambda e: (-np.nan_to_num(e["rate"], nan=-1), e["group"]))


def write_classification(
    out: str | Path,
    rates_path: str | Path,
    threshold: Threshold,
    threshold_source: str,
    scores: np.ndarray,
    ids: Sequence[Any] | None,
    labels: Sequence[int] | None,
    groups: Sequence[str] | None,
) -> list[dict[str, Any]]:
    """Flags every text with ``threshold``: one JSON line per text in ``out`` (id, group, score, member,
    label), the per-group contamination rates in ``rates_path``. Returns the rates, highest first."""
    flags = flag(scores, threshold)
    scored = ~np.isnan(scores)
    groups = list(groups) if groups is not None else ["all"] * len(scores)
    with replacing(out) as temporary, open(temporary, "w", encoding="utf-8") as f:
        for i, score in enumerate(scores):
            row = {
                "id": ids[i] if ids is not None else i,
                "group": groups[i],
                threshold.method: None if math.isnan(score) else float(score),
                "member": bool(flags[i]) if scored[i] else None,
            }
            if labels is not None:
                row["label"] = labels[i]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    rates = contamination_rates(groups, flags, scored)
    payload = {
        "threshold": threshold_source,
        "method": threshold.method,
        "value": _json_number(threshold.value),
        "groups": [{**entry, "rate": None if math.isnan(entry["rate"]) else entry["rate"]} for entry in rates],
    }
    write_atomic(rates_path, json.dumps(payload, indent=1, allow_nan=False) + "\n")
    return rates
