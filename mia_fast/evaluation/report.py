"""Evaluation reports: metrics.json (written, and read back by :func:`load_metrics`), report.md and a self-contained
report.html around the figures (:mod:`~mia_fast.evaluation.figures`), and the text table.

Model-free baselines (``blind``) are marked as such, and what they say of the benchmark heads the report and closes
the table, with which methods are above both chance (the permutation control) and the best model-free baseline. A
TPR at an FPR the non-members cannot resolve is "n/a" with the number needed.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import fsync_directory
from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.columns import MODEL_FREE_NOTE, display_name, k_families, ranked
from mia_fast.evaluation.figures import plot_auroc_by_k, plot_histograms, plot_roc
from mia_fast.evaluation.metrics import MethodMetrics
from mia_fast.evaluation.verdicts import Verdict

BucketResults = Mapping[str, Mapping[str, MethodMetrics]]


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

    The report appears whole or not at all (:class:`ReportFiles`): a full disk is one line naming the file, and
    leaves every file of ``directory`` as it was.
    """
    with ReportFiles(directory) as files:
        written = _write_files(files, labels, columns, results, meta, verdicts, buckets, figures)
    return [files.directory / path.name for path in written]


class ReportFiles:
    """The files of a report, written into a temporary folder in its ``directory`` (:meth:`path`) and renamed into
    place only once every one is whole; the folder is removed whatever happens, and ``directory`` too where it was
    made for the report and stays empty. An OSError while they are written (a full disk) is refused in one line naming
    the file."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.writing = self.directory
        self.folder = self.directory
        self.made = False

    def __enter__(self) -> ReportFiles:
        self.made = not self.directory.exists()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.folder = Path(tempfile.mkdtemp(dir=self.directory, prefix=".report-"))
        except OSError as exc:
            raise self._refusal(exc) from None
        return self

    def path(self, name: str) -> Path:
        """Where the file ``name`` of the report is written now."""
        self.writing = self.directory / name
        return self.folder / name

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, *rest: Any) -> None:
        try:
            if kind is None:
                staged = sorted(self.folder.iterdir())
                for path in staged:
                    with open(path, "rb") as f:
                        os.fsync(f.fileno())
                for path in staged:
                    os.replace(path, self.directory / path.name)
                fsync_directory(self.directory)
            elif isinstance(error, OSError):
                raise self._refusal(error) from None
        finally:
            if self.folder != self.directory:
                shutil.rmtree(self.folder, ignore_errors=True)
            if kind is not None and self.made:
                with contextlib.suppress(OSError):
                    self.directory.rmdir()

    def _refusal(self, error: OSError) -> MiaFastError:
        return MiaFastError(
            f"cannot write {self.writing}: {error.strerror or error}; no report was written and the files of "
            f"{self.directory} were left as they were"
        )


def _write_files(
    files: ReportFiles,
    labels: np.ndarray,
    columns: Mapping[str, np.ndarray],
    results: Mapping[str, MethodMetrics],
    meta: Mapping[str, Any],
    verdicts: Sequence[Verdict],
    buckets: BucketResults | None,
    figures: Sequence[tuple[str, Path]],
) -> list[Path]:
    """Every file of the report (see :func:`write_report`) into ``files``."""
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
    metrics_path = files.path("metrics.json")
    metrics_path.write_text(json.dumps(_finite(payload), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    roc = plot_roc(files.path("roc.png"), labels, columns, results)
    histograms = plot_histograms(files.path("histograms.png"), labels, columns, results)
    shown = [
        ("ROC curves (each k-method at its best k; linear and log-log axes)", roc),
        ("Scores of members and non-members", histograms),
    ]
    written = [metrics_path, roc, histograms]
    if any(len(columns) > 1 for columns in k_families(list(results)).values()):
        by_k = plot_auroc_by_k(files.path("auroc_by_k.png"), results)
        shown.append(("AUROC against k, with 95% CI bands", by_k))
        written.append(by_k)
    markdown, page = write_documents(files, meta, results, buckets, [*shown, *figures], verdicts)
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
    files: ReportFiles,
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
    markdown = files.path("report.md")
    markdown.write_text("\n".join(md), encoding="utf-8")

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
    page = files.path("report.html")
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>mia-fast report</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>",
        encoding="utf-8",
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
            number_cell(_nan_if_none(r.tpr_at_fpr.get(metrics.fpr_key(level))), 10) for level in metrics.FPR_LEVELS
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


def number_cell(value: float, width: int, sign: str = "") -> str:
    """``value`` to three decimals right-aligned in ``width`` (``sign``: a format sign such as ``+``); "n/a" for NaN."""
    return f"{'n/a':>{width}}" if math.isnan(value) else f"{value:>{sign}{width}.3f}"
