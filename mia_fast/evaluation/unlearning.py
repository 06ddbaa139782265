"""Auditing machine unlearning (Min-K% Prob, §7): the texts a model was meant to forget are scored under
the model before and after unlearning, and each is flagged when it still looks like a member of the
model after.

Two rules decide "still looks like a member":

- ``ThresholdRule``: a threshold calibrated on the model after unlearning (``mia-fast calibrate``),
  applied to the after score, as ``classify`` does;
- ``RatioRule``: the after score kept at least ``ratio`` of the before score. It is defined for mean
  log-probabilities (loss, Min-K%), which are negative: the kept share is before / after, 1 when
  nothing changed, 0.5 when the text's negative log-likelihood doubled, above 1 when it fell. A
  column of another kind (Min-K%++ z-scores, calibrated differences) has no such origin, so the rule refuses it.

A text the model never saw keeps its score too, so the ratio rule flags it as well: the audit is meant
for texts that were supposed to be unlearned.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.figures import pyplot, save_figure
from mia_fast.evaluation.thresholds import Threshold, contamination_rates, flag
from mia_fast.methods.registry import log_likelihood_column

# A text still looks like a member when its mean negative log-likelihood rose by at most 1/0.9 - 1 = 11%.
# In the benchmark (benchmarks/README.md, "Unlearning audit") gradient ascent left the texts it did not
# target at 0.96-1.01 of their Min-K% score and took the unlearned ones to 0.49-0.79.
DEFAULT_RATIO = 0.9


class Rule(Protocol):
    description: str

    def flags(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """True where a text still looks like a member of the model after (False where a score is NaN)."""

    def boundary(self, before: np.ndarray) -> np.ndarray:
        """The after score from which a text with each of these before scores is flagged."""


@dataclass(frozen=True)
class RatioRule:
    """Still a member when the after score kept at least ``ratio`` of the before score (mean log-probabilities only:
    loss, zlib, mink_K)."""

    column: str
    ratio: float = DEFAULT_RATIO

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise MiaFastError(f"the kept ratio must be in (0, 1], got {self.ratio}")
        if not log_likelihood_column(self.column):
            raise MiaFastError(
                f"the ratio rule compares mean log-probabilities (loss, zlib, mink_K); {self.column} has no such "
                "origin: "
                "pass --threshold FILE (from 'mia-fast calibrate' on the model after unlearning) instead"
            )

    @property
    def description(self) -> str:
        return f"kept at least {self.ratio * 100:g}% of its value before unlearning (before / after >= {self.ratio:g})"

    def flags(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        # before / after >= ratio, multiplied out by the negative after score.
        with np.errstate(invalid="ignore"):
            return self.ratio * after >= before

    def boundary(self, before: np.ndarray) -> np.ndarray:
        return before / self.ratio


@dataclass(frozen=True)
class ThresholdRule:
    """Still a member when the after score reaches a threshold calibrated on the model after."""

    threshold: Threshold
    source: str

    @property
    def description(self) -> str:
        return f"is at or above {self.threshold.value:.6g} after unlearning (the threshold of {self.source})"

    def flags(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        return flag(after, self.threshold)

    def boundary(self, before: np.ndarray) -> np.ndarray:
        return np.full(np.shape(before), self.threshold.value)


@dataclass(frozen=True)
class UnlearningAudit:
    column: str
    rule: Rule
    before_model: str
    after_model: str
    before: np.ndarray
    after: np.ndarray
    groups: list[str]
    flags: np.ndarray

    @property
    def change(self) -> np.ndarray:
        return self.after - self.before

    @property
    def scored(self) -> np.ndarray:
        return ~np.isnan(self.before) & ~np.isnan(self.after)

    def summary(self, groups: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Per group: texts, scored texts, flagged ones, their share of the scored, and the mean change; highest share
        first."""
        groups = self.groups if groups is None else groups
        changes: dict[str, list[float]] = {str(group): [] for group in groups}
        for group, change, scored in zip(groups, self.change, self.scored):
            if scored:
                changes[str(group)].append(change)
        entries = contamination_rates(groups, self.flags, self.scored)
        for entry in entries:
            entry["mean_change"] = float(np.mean(changes[entry["group"]])) if changes[entry["group"]] else float("nan")
        return entries

    def total(self) -> dict[str, Any]:
        return self.summary(["all"] * len(self.before))[0]


def audit_unlearning(
    column: str,
    before: Sequence[float],
    after: Sequence[float],
    rule: Rule,
    before_model: str,
    after_model: str,
    groups: Sequence[str] | None = None,
) -> UnlearningAudit:
    """Flags each text whose after score still looks like a member's by ``rule``; ``groups`` default to one, "all"."""
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if before.shape != after.shape:
        raise MiaFastError(f"{before.size} scores before unlearning but {after.size} after")
    groups = [str(g) for g in groups] if groups is not None else ["all"] * before.size
    flags = rule.flags(before, after) & ~np.isnan(before) & ~np.isnan(after)
    return UnlearningAudit(column, rule, before_model, after_model, before, after, groups, flags)


def plot_before_after(path: Path, audit: UnlearningAudit) -> Path:
    plt = pyplot()

    scored, kept = audit.scored, audit.flags
    forgotten = scored & ~kept
    fig, ax = plt.subplots(figsize=(6.4, 6))
    ax.scatter(
        audit.before[forgotten], audit.after[forgotten], s=20, color="tab:blue", label=f"unlearned ({forgotten.sum()})"
    )
    ax.scatter(
        audit.before[kept], audit.after[kept], s=20, color="tab:red", label=f"still looks like a member ({kept.sum()})"
    )
    if scored.any():
        values = np.r_[audit.before[scored], audit.after[scored]]
        line = np.linspace(values.min(), values.max(), 2)
        ax.plot(line, line, color="grey", linestyle=":", linewidth=1, label="after = before")
        ax.plot(
            line, audit.rule.boundary(line), color="tab:red", linestyle="--", linewidth=1, label="flagged from here up"
        )
    ax.set_xlabel(f"{audit.column} before unlearning ({_short(audit.before_model)})")
    ax.set_ylabel(f"{audit.column} after unlearning ({_short(audit.after_model)})")
    ax.set_title(textwrap.fill(f"flagged when {audit.column} {audit.rule.description}", 80), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def format_table(audit: UnlearningAudit) -> str:
    """Per group and in total: texts, flagged, their share and the mean change of the score."""
    lines = [f"{'group':<32} {'texts':>6} {'flagged':>8} {'share':>7} {'mean change':>12}"]
    for entry in [*audit.summary(), {**audit.total(), "group": "total"}]:
        lines.append(
            f"{entry['group'][:32]:<32} {entry['snippets']:>6} {entry['flagged']:>8} {entry['rate']:>7.1%} "
            f"{entry['mean_change']:>12.4g}"
        )
    return "\n".join(lines)


def write_audit_report(
    directory: str | Path,
    audit: UnlearningAudit,
    ids: Sequence[Any] | None,
    labels: Sequence[int] | None,
    data_name: str,
) -> list[Path]:
    """Writes audit.jsonl (a row per text), groups.json, before_after.png and report.md into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rows_path = directory / "audit.jsonl"
    with open(rows_path, "w", encoding="utf-8") as f:
        for i in range(audit.before.size):
            row = {
                "id": ids[i] if ids is not None else i,
                "group": audit.groups[i],
                "before": _number(audit.before[i]),
                "after": _number(audit.after[i]),
                "change": _number(audit.change[i]),
                "flag": bool(audit.flags[i]) if audit.scored[i] else None,
            }
            if labels is not None:
                row["label"] = labels[i]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    meta = {
        "data": data_name,
        "method": audit.column,
        "before": audit.before_model,
        "after": audit.after_model,
        "rule": audit.rule.description,
    }
    groups_path = directory / "groups.json"
    groups_path.write_text(
        json.dumps({"meta": meta, "total": audit.total(), "groups": audit.summary()}, indent=1) + "\n"
    )
    plot_path = plot_before_after(directory / "before_after.png", audit)
    report_path = directory / "report.md"
    report_path.write_text(_markdown(audit, meta))
    return [rows_path, groups_path, plot_path, report_path]


def _markdown(audit: UnlearningAudit, meta: Mapping[str, str]) -> str:
    total = audit.total()
    unscored = total["snippets"] - total["scored"]
    lines = [
        "# mia-fast unlearning audit",
        "",
        f"**{total['flagged']} of {total['scored']} texts ({total['rate']:.1%}) still look like members** of the "
        "model after "
        f"unlearning: their {audit.column} {audit.rule.description}. Mean change of the score: "
        f"{total['mean_change']:.4g} "
        "(negative: the text became less likely)." + (f" {unscored} texts could not be scored." if unscored else ""),
        "",
        "A text the model never saw keeps its score as well: read the flags of texts that were meant to be unlearned.",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in meta.items()),
        "",
        "| group | texts | flagged | share | mean change |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {e['group']} | {e['snippets']} | {e['flagged']} | {e['rate']:.1%} | {e['mean_change']:.4g} |"
            for e in audit.summary()
        ),
        "",
        f"![{audit.column} before and after unlearning](before_after.png)",
        "",
        "Per text: `audit.jsonl`; per group: `groups.json`.",
        "",
    ]
    return "\n".join(lines)
