"""Evaluation reports: metrics.json, a ROC figure (linear and log-log) and a sorted text table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import numpy as np

from mia_fast import metrics
from mia_fast.metrics import MethodMetrics


def write_report(
    directory: str | Path,
    labels: np.ndarray,
    columns: Mapping[str, np.ndarray],
    results: Mapping[str, MethodMetrics],
    meta: Mapping[str, object],
) -> list[Path]:
    """Writes metrics.json and roc.png into ``directory``; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    metrics_path = directory / "metrics.json"
    payload = {"meta": dict(meta), "methods": {name: r.to_dict() for name, r in ranked(results)}}
    metrics_path.write_text(json.dumps(payload, indent=2) + "\n")
    return [metrics_path, plot_roc(directory / "roc.png", labels, columns, results)]


def ranked(results: Mapping[str, MethodMetrics]) -> list[tuple[str, MethodMetrics]]:
    return sorted(results.items(), key=lambda item: -item[1].auroc)


def plot_roc(path: Path, labels: np.ndarray, columns: Mapping[str, np.ndarray], results: Mapping[str, MethodMetrics]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (linear, loglog) = plt.subplots(1, 2, figsize=(15, 5.5))
    palette = plt.get_cmap("tab20").colors
    for i, (name, result) in enumerate(ranked(results)):
        scores = np.asarray(columns[name], dtype=np.float64)
        finite = ~np.isnan(scores)
        fpr, tpr, _ = metrics.roc_curve(labels[finite], scores[finite])
        # 20 colours, then the same colours dashed, so that every curve stays distinguishable.
        style = dict(color=palette[i % len(palette)], linestyle=("-", "--", "-.", ":")[i // len(palette) % 4])
        linear.plot(fpr, tpr, label=f"{name} (AUROC {result.auroc:.3f})", **style)
        loglog.plot(fpr, tpr, **style)
    for ax in (linear, loglog):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.grid(alpha=0.3)
    n = len(labels)
    floor = 1.0 / max(n, 10)
    loglog.set_xscale("log")
    loglog.set_yscale("log")
    loglog.set_xlim(floor / 2, 1)
    loglog.set_ylim(floor / 2, 1)
    first = next(iter(results.values()))
    counts = f"{first.n_members} members, {first.n_nonmembers} non-members"
    linear.set_title(f"ROC ({counts})")
    loglog.set_title("ROC, log-log axes (the low-FPR regime)")
    fig.legend(loc="center left", bbox_to_anchor=(0.8, 0.5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def format_table(results: Mapping[str, MethodMetrics]) -> str:
    """A fixed-width table sorted by AUROC, best first."""
    levels = [metrics.fpr_key(level) for level in metrics.FPR_LEVELS]
    header = f"{'method':<16} {'AUROC':>6} {'95% CI':>15} " + " ".join(f"{'TPR@' + k:>10}" for k in levels) + f" {'FPR@95TPR':>10}"
    lines = [header, "-" * len(header)]
    for name, r in ranked(results):
        ci = f"[{r.auroc_ci[0]:.3f}, {r.auroc_ci[1]:.3f}]"
        tprs = " ".join(f"{r.tpr_at_fpr[k]:>10.3f}" for k in levels)
        lines.append(f"{name:<16} {r.auroc:>6.3f} {ci:>15} {tprs} {r.fpr_at_95tpr:>10.3f}")
    first = next(iter(results.values()), None)
    if first is not None:
        lines.append(f"members: {first.n_members}, non-members: {first.n_nonmembers}, excluded (unscorable): {first.n_excluded}")
    return "\n".join(lines)
