"""Evaluation reports: metrics.json, figures (ROC, AUROC against k, score histograms), report.md and a
self-contained report.html, a text table, and the comparison of two reports.

A method taking k (Min-K%, Min-K%++) gives one column per k, named ``{family}_{k}``: the ROC curves and
histograms show each family at its best k beside every other method, and the AUROC of every k is
drawn against k, a panel per family, with its bootstrap CI. Model-free baselines (``blind``) are
marked as such, and what they say of the benchmark heads the report and closes the table, with which
methods are above both chance (the permutation control) and the best model-free baseline. A TPR at an
FPR the non-members cannot resolve is "n/a" with the number needed, and the log-log ROC stops at 1/n.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import write_atomic
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.figures import pyplot, save_figure
from mia_fast.evaluation.metrics import MethodMetrics
from mia_fast.evaluation.verdicts import Verdict

BucketResults = Mapping[str, Mapping[str, MethodMetrics]]
_K_COLUMN = re.compile(r"^(?P<family>.+)_(?P<k>\d+\.\d+)$")
# Marks a model-free baseline in tables and figures; a footnote says so.
MODEL_FREE = "*"
MODEL_FREE_NOTE = "* model-free baseline: a classifier of the texts alone, scored out of fold (no model involved)"
# Meta entries that say where a report's scores went, what it took or how its fine-tuning went: not what it measured.
_INCIDENTAL_META = re.compile(r"^(scores|python|seconds_.*|first_loss|last_loss)$")


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


def write_report(
    directory: str | Path,
    labels: np.ndarray,
    columns: Mapping[str, np.ndarray],
    results: Mapping[str, MethodMetrics],
    meta: Mapping[str, Any],
    verdicts: Sequence[Verdict] = (),
    buckets: BucketResults | None = None,
    figures: Sequence[tuple[str, Path]] = (),
) -> list[Path]:
    """Writes metrics.json, roc.png, histograms.png, report.md and report.html into ``directory``.

    ``verdicts`` (:func:`~mia_fast.evaluation.verdicts.all_verdicts`) head the report and go into metrics.json with
    their minimum detectable AUROCs; ``buckets`` holds the metrics of each length bucket; ``figures`` adds
    (caption, path) figures already written into ``directory`` (e.g. a training-loss curve).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"meta": dict(meta), "methods": {name: r.to_dict() for name, r in ranked(results)}}
    by_key = {v.key: v for v in verdicts}
    if "model_free" in by_key:
        model_free = by_key["model_free"]
        payload["model_free"] = {
            "columns": [n for n in BLIND_COLUMNS if n in results],
            "verdict": model_free.text,
            "min_detectable_auroc": model_free.min_detectable_auroc,
            **model_free.details,
        }
    if verdicts:
        payload["verdict"] = " ".join(v.text for v in verdicts)
        payload["verdicts"] = {v.key: v.to_dict() for v in verdicts}
    if buckets:
        payload["buckets"] = {label: {name: r.to_dict() for name, r in ranked(res)} for label, res in buckets.items()}
    metrics_path = write_atomic(
        directory / "metrics.json", json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n"
    )
    roc = plot_roc(directory / "roc.png", labels, columns, results)
    histograms = plot_histograms(directory / "histograms.png", labels, columns, results)
    shown = [
        ("ROC curves (each k-method at its best k; linear and log-log axes)", roc),
        ("Scores of members and non-members", histograms),
    ]
    written = [metrics_path, roc, histograms]
    if any(len(columns) > 1 for columns in k_families(list(results)).values()):
        by_k = plot_auroc_by_k(directory / "auroc_by_k.png", results)
        shown.append(("AUROC against k, with 95% CI bands", by_k))
        written.append(by_k)
    markdown, page = write_documents(directory, meta, results, buckets, [*shown, *figures], verdicts)
    return [*written, markdown, page]


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (e.g. the CI of a bucket too small to resample) as None: JSON has
    neither."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


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


def tpr_cell(result: MethodMetrics, level: float) -> str:
    """TPR at ``level`` FPR, or "n/a (needs ≥ N non-members)" where the non-members cannot resolve it."""
    value = _nan_if_none(result.tpr_at_fpr.get(metrics.fpr_key(level)))
    return f"n/a (needs ≥ {metrics.nonmembers_needed(level):,} non-members)" if math.isnan(value) else f"{value:.3f}"


def pvalue_cell(p: float) -> str:
    return "–" if math.isnan(p) else f"{p:.3f}"


def _metric_rows(results: Mapping[str, MethodMetrics]) -> tuple[list[str], list[list[str]]]:
    header = [
        "method",
        "AUROC",
        "95% CI",
        "perm. p",
        *(f"TPR@{metrics.fpr_key(level)}FPR" for level in metrics.FPR_LEVELS),
        "FPR@95%TPR",
    ]
    rows = [
        [
            display_name(name),
            f"{r.auroc:.3f}",
            f"[{r.auroc_ci[0]:.3f}, {r.auroc_ci[1]:.3f}]",
            pvalue_cell(r.significance.permutation_p),
            *(tpr_cell(r, level) for level in metrics.FPR_LEVELS),
            f"{r.fpr_at_95tpr:.3f}",
        ]
        for name, r in ranked(results)
    ]
    return header, rows


def _bucket_rows(results: Mapping[str, MethodMetrics], buckets: BucketResults) -> tuple[list[str], list[list[str]]]:
    labels = list(buckets)
    header = ["method", *(f"{b} ({_counts(buckets[b])})" for b in labels)]
    rows = [
        [name, *(f"{buckets[b][name].auroc:.3f}" if name in buckets[b] else "–" for b in labels)]
        for name, _ in ranked(results)
    ]
    return header, rows


def _counts(results: Mapping[str, MethodMetrics]) -> str:
    first = next(iter(results.values()))
    return f"{first.n_members}+{first.n_nonmembers}"


def write_documents(
    directory: Path,
    meta: Mapping[str, Any],
    results: Mapping[str, MethodMetrics],
    buckets: BucketResults | None,
    figures: Sequence[tuple[str, Path]],
    verdicts: Sequence[Verdict] = (),
) -> tuple[Path, Path]:
    """report.md (figures linked beside it) and report.html (figures embedded: one file to send)."""
    first = next(iter(results.values()))
    summary = (
        f"{first.n_members} members, {first.n_nonmembers} non-members, {first.n_excluded} excluded (nothing to score)"
    )
    tables = [("Detection quality, best AUROC first", *_metric_rows(results))]
    if buckets:
        tables.append(
            ("AUROC by text length in words (members+non-members per bucket)", *_bucket_rows(results, buckets))
        )
    settings = [[str(k), _setting(v)] for k, v in meta.items()]

    md = ["# mia-fast evaluation report", "", summary, ""]
    for verdict in verdicts:
        md += [f"**{verdict.text}**" if verdict.warning else verdict.text, ""]
    for title, header, rows in tables:
        md += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        md += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    if any(name in BLIND_COLUMNS for name in results):
        md += [MODEL_FREE_NOTE, ""]
    for caption, path in figures:
        md += [f"## {caption}", "", f"![{caption}]({path.name})", ""]
    md += ["## Settings", "", "| setting | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in settings), ""]
    markdown = write_atomic(directory / "report.md", "\n".join(md))

    def html_table(title: str, header: list[str], rows: list[list[str]]) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<h2>{html.escape(title)}</h2><table><tr>{head}</tr>{cells}</table>"

    body = [f"<h1>mia-fast evaluation report</h1><p>{html.escape(summary)}</p>"]
    for verdict in verdicts:
        body.append(f"<p class='{'warning' if verdict.warning else 'note'}'>{html.escape(verdict.text)}</p>")
    body += [html_table(*t) for t in tables]
    if any(name in BLIND_COLUMNS for name in results):
        body.append(f"<p>{html.escape(MODEL_FREE_NOTE)}</p>")
    for caption, path in figures:
        data = base64.b64encode(path.read_bytes()).decode()
        body.append(
            f"<h2>{html.escape(caption)}</h2><img alt='{html.escape(caption)}' src='data:image/png;base64,{data}'>"
        )
    body.append(html_table("Settings", ["setting", "value"], settings))
    style = (
        "body{font-family:sans-serif;max-width:1400px;margin:2em auto}"
        "table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
        "td:first-child{text-align:left}"
        "img{max-width:100%}"
        ".warning{background:#fde2e1;border-left:6px solid #c0392b;padding:8px 12px;font-weight:bold}"
        ".note{background:#eef4fb;border-left:6px solid #2c6fbb;padding:8px 12px}"
    )
    page = write_atomic(
        directory / "report.html",
        "<!doctype html><html><head><meta charset='utf-8'><title>mia-fast report</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>",
    )
    return markdown, page


def _setting(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)) and len(value) > 12:
        return f"{len(value)} values, from {_setting(value[0])} to {_setting(value[-1])}"
    return str(value)


def format_table(results: Mapping[str, MethodMetrics], verdicts: Sequence[Verdict] = ()) -> str:
    """A fixed-width table sorted by AUROC, best first; "n/a" where the non-members cannot resolve an FPR; then the
    ``verdicts``."""
    width = max([16, *(len(display_name(name)) for name in results)])
    header = (
        f"{'method':<{width}} {'AUROC':>6} {'95% CI':>15} {'perm. p':>7} "
        + " ".join(f"{'TPR@' + metrics.fpr_key(level):>10}" for level in metrics.FPR_LEVELS)
        + f" {'FPR@95TPR':>10}"
    )
    lines = [header, "-" * len(header)]
    for name, r in ranked(results):
        ci = f"[{r.auroc_ci[0]:.3f}, {r.auroc_ci[1]:.3f}]"
        tprs = " ".join(
            _number_cell(_nan_if_none(r.tpr_at_fpr.get(metrics.fpr_key(level))), 10) for level in metrics.FPR_LEVELS
        )
        p = pvalue_cell(r.significance.permutation_p)
        lines.append(f"{display_name(name):<{width}} {r.auroc:>6.3f} {ci:>15} {p:>7} {tprs} {r.fpr_at_95tpr:>10.3f}")
    first = next(iter(results.values()), None)
    if first is not None:
        lines.append(
            f"members: {first.n_members}, non-members: {first.n_nonmembers}, excluded (unscorable): {first.n_excluded}"
        )
        missing = [
            f"TPR@{metrics.fpr_key(level)}FPR needs ≥ {metrics.nonmembers_needed(level):,}"
            for level in metrics.FPR_LEVELS
            if metrics.missing_tpr_reason(level, first.n_nonmembers)
        ]
        if missing:
            lines.append(f"n/a: {'; '.join(missing)} non-members (the smallest non-zero FPR is 1/n)")
    if any(name in BLIND_COLUMNS for name in results):
        lines.append(MODEL_FREE_NOTE)
    lines += [v.text for v in verdicts]
    return "\n".join(lines)


def load_metrics(directory: str | Path) -> dict[str, Any]:
    """metrics.json of a report: its ``meta`` and ``methods`` (a metric that was undefined, null in the file, as
    NaN)."""
    path = Path(directory) / "metrics.json"
    try:
        payload = json.loads(path.read_text())
        methods, meta = payload["methods"], payload.get("meta", {})
        for result in methods.values():
            result["auroc"] = _nan_if_none(result["auroc"])
            result["tpr_at_fpr"] = {k: _nan_if_none(v) for k, v in result["tpr_at_fpr"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MiaFastError(f"{path}: not a mia-fast metrics file ({exc})") from None
    return {"meta": meta if isinstance(meta, dict) else {}, "methods": methods}


def _nan_if_none(value: Any) -> float:
    return math.nan if value is None else float(value)


def _number_cell(value: float, width: int, sign: str = "") -> str:
    return f"{'n/a':>{width}}" if math.isnan(value) else f"{value:>{sign}{width}.3f}"


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
            f"{_number_cell(ta, 9)} {_number_cell(tb, 9)} {_number_cell(tb - ta, 7, '+')}"
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
