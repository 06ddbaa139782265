"""Figures: matplotlib imported only when one is drawn, on the file-only Agg backend; the report's ROC curves, score
histograms and AUROC against k.

A method taking k (Min-K%, Min-K%++) gives one column per k, named ``{family}_{k}``: the ROC curves and histograms
show each family at its best k beside every other method (a model-free baseline marked, and dashed grey in the
ROC), and the AUROC of every k is drawn against k, a panel per family, with its bootstrap CI. The log-log ROC stops
at 1/n.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.columns import display_name, k_families, shown_columns
from mia_fast.evaluation.metrics import MethodMetrics


def pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (matplotlib: only when drawing)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib: only when drawing, after the Agg backend is set)

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lays ``fig`` out, writes it to ``path`` and frees it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def _styles(plt, count: int) -> list[dict]:
    # 20 colours, then the same colours dashed, so that every curve stays distinguishable.
    palette = plt.get_cmap("tab20").colors
    return [
        dict(color=palette[i % len(palette)], linestyle=("-", "--", "-.", ":")[i // len(palette) % 4])
        for i in range(count)
    ]


def plot_roc(
    path: Path, labels: np.ndarray, columns: Mapping[str, np.ndarray], results: Mapping[str, MethodMetrics]
) -> Path:
    plt = pyplot()
    fig, (linear, loglog) = plt.subplots(1, 2, figsize=(15, 5.5))
    order = shown_columns(results)
    methods = [name for name in order if name not in BLIND_COLUMNS]
    styles = dict(zip(methods, _styles(plt, len(methods))))
    for model_free, name in enumerate(n for n in order if n in BLIND_COLUMNS):
        styles[name] = dict(color=("0.35", "0.6")[model_free % 2], linestyle="--", linewidth=2)
    for name in order:
        scores = np.asarray(columns[name], dtype=np.float64)
        finite = ~np.isnan(scores)
        fpr, tpr, _ = metrics.roc_curve(labels[finite], scores[finite])
        linear.plot(fpr, tpr, label=f"{display_name(name)} (AUROC {results[name].auroc:.3f})", **styles[name])
        loglog.plot(fpr, tpr, **styles[name])
    for ax in (linear, loglog):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.grid(alpha=0.3)
    first = results[order[0]]
    # Below 1/n non-members the curve holds no point: the log-log axes stop where the data can speak.
    loglog.set_xscale("log")
    loglog.set_yscale("log")
    loglog.set_xlim(1.0 / max(first.n_nonmembers, 2), 1)
    loglog.set_ylim(1.0 / max(first.n_members, 2), 1)
    linear.set_title(f"ROC ({first.n_members} members, {first.n_nonmembers} non-members)")
    loglog.set_title("ROC, log-log axes (the low-FPR regime)")
    fig.legend(loc="center left", bbox_to_anchor=(0.8, 0.5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_auroc_by_k(path: Path, results: Mapping[str, MethodMetrics]) -> Path:
    """A panel per k-method family: AUROC against k with its bootstrap 95% CI as a band."""
    plt = pyplot()
    families = {family: columns for family, columns in k_families(list(results)).items() if len(columns) > 1}
    fig, axes = plt.subplots(1, len(families), figsize=(5.5 * len(families), 4), squeeze=False, sharey=True)
    for ax, (family, columns) in zip(axes.flat, families.items()):
        ks = [k for k, _ in columns]
        found = [results[c] for _, c in columns]
        ax.fill_between(ks, [r.auroc_ci[0] for r in found], [r.auroc_ci[1] for r in found], alpha=0.25, label="95% CI")
        ax.plot(ks, [r.auroc for r in found], marker="o", label="AUROC")
        best = int(np.argmax([r.auroc for r in found]))
        ax.annotate(
            f"best k {ks[best]:g}: {found[best].auroc:.3f}",
            (ks[best], found[best].auroc),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
        )
        ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
        ax.set_ylim(top=1.06)  # room for the best k's label
        ax.set_title(family)
        ax.set_xlabel("k (fraction of tokens)")
        ax.grid(alpha=0.3)
    axes.flat[0].set_ylabel("AUROC")
    axes.flat[0].legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


def plot_histograms(
    path: Path, labels: np.ndarray, columns: Mapping[str, np.ndarray], results: Mapping[str, MethodMetrics]
) -> Path:
    """One panel per method (k-methods at their best k), best AUROC first: the score distributions of members and
    non-members."""
    plt = pyplot()
    order = [(name, results[name]) for name in shown_columns(results)]
    cols = min(5, len(order))
    rows = math.ceil(len(order) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    for ax, (name, result) in zip(axes.flat, order):
        scores = np.asarray(columns[name], dtype=np.float64)
        finite = ~np.isnan(scores)
        values = scores[finite]
        bins = np.histogram_bin_edges(values, bins=30) if values.size and np.ptp(values) > 0 else 10
        for label, colour, legend in ((1, "tab:red", "members"), (0, "tab:blue", "non-members")):
            ax.hist(
                scores[finite & (labels == label)],
                bins=bins,
                histtype="stepfilled",  # one polygon, not a patch per bar: the figure draws several times faster
                alpha=0.55,
                color=colour,
                label=legend,
                density=True,
            )
        ax.set_title(f"{display_name(name)}  (AUROC {result.auroc:.3f})", fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(order) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("score distributions (higher = more likely a member)", fontsize=11)
    return save_figure(fig, path)


def plot_dev_auroc(path: Path, dev_auroc: Mapping[str, list[float]], kept_layer: int) -> Path:
    """Dev AUROC of each layer's probe under both normalisations, the kept layer marked."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, values in dev_auroc.items():
        ax.plot(range(len(values)), values, marker=".", label=f"{name} normalisation")
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.axvline(kept_layer, color="black", linestyle="--", linewidth=1, label=f"kept: layer {kept_layer}")
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("dev AUROC")
    ax.set_title("probe: dev AUROC by layer")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
