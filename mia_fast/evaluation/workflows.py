"""The workflows behind the commands, as library functions over a typed run configuration: evaluate labelled
texts (``mia-fast eval``), calibrate a threshold and classify with it (``calibrate``, ``classify``), and audit
an unlearning (``audit-unlearning``). Each scores through :func:`mia_fast.scoring.runner.score_file`, resumably,
then reads the scores back and reports."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.files import Dataset, read_scores
from mia_fast.data.suites import SUITES
from mia_fast.data.text import assign_buckets, count_words
from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.assessment import BlindSettings, assess
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.blind_fits import cross_validation_folds
from mia_fast.evaluation.dataset_inference import (
    MIN_TEXTS,
    DatasetInference,
    check_disjoint_texts,
    dataset_inference,
    write_dataset_inference,
)
from mia_fast.evaluation.report import write_report
from mia_fast.evaluation.thresholds import (
    Threshold,
    calibrate,
    check_rule,
    require_both_classes,
    write_classification,
)
from mia_fast.evaluation.unlearning import Rule, UnlearningAudit, audit_unlearning, write_audit_report
from mia_fast.evaluation.verdicts import KnownLeak, Verdict
from mia_fast.methods.registry import resolve_methods
from mia_fast.scoring.config import RunConfig
from mia_fast.scoring.runner import score_file

Log = Callable[[str], None]


def _silent(message: str) -> None:
    return None


def scored_columns(dataset: Dataset, config: RunConfig, data_name: str, log: Log) -> dict[str, np.ndarray]:
    """Scores ``dataset`` into ``config.output.out`` (resumably) and reads every score column back."""
    score_file(dataset, config, log=log, data_name=data_name)
    columns = [c for r in resolve_methods(config.scoring.methods, config.scoring.k) for c in r.columns]
    return read_scores(config.output.path, columns)


@dataclass(frozen=True)
class EvaluationConfig:
    """Where the report goes, the bootstrap resamples of the AUROC CI and their seed, word-length bucket edges
    (metrics per bucket too), the model-free baselines (whether they run, their refit shuffles) and the benchmark
    suite the data is, if any (its leak on record is set beside the run's verdicts)."""

    report: str | os.PathLike
    bootstrap: int = 1000
    seed: int = 0
    buckets: Sequence[int] | None = None
    blind: BlindSettings = BlindSettings()
    suite: str | None = None


@dataclass
class Evaluation:
    results: dict[str, metrics.MethodMetrics]
    paths: list[Path]
    verdicts: list[Verdict]


def _refuse_a_class_without_text(texts: Sequence[str], labels: np.ndarray) -> None:
    """One line before anything is scored or written where every text of a class is empty or blank: none of them
    can be scored, and the AUROC needs both classes."""
    blank = np.fromiter((not text.strip() for text in texts), dtype=bool, count=len(texts))
    for value, which in ((1, "member"), (0, "non-member")):
        rows = labels == value
        if rows.any() and blank[rows].all():
            raise MiaFastError(
                f"AUROC is undefined: all {int(rows.sum())} {which} rows have no text to score (empty or blank); "
                "both classes need scored rows"
            )


def evaluate_file(
    dataset: Dataset,
    config: RunConfig,
    evaluation: EvaluationConfig,
    meta: Mapping[str, Any] | None = None,
    log: Log = _silent,
) -> Evaluation:
    """Scores labelled texts (resumably, into ``config.output.out``), adds the model-free baselines, and writes
    the report (metrics.json, figures, report.md, report.html) into ``evaluation.report``. ``meta`` is recorded
    in the report beside the run's own settings (e.g. the input's name under ``data``)."""
    if evaluation.bootstrap < 1:
        raise MiaFastError(f"--bootstrap must be a positive number of resamples, got {evaluation.bootstrap}")
    labels = metrics.check_labels(dataset.labels)
    _refuse_a_class_without_text(dataset.texts, labels)
    if evaluation.blind.enabled:
        cross_validation_folds(labels)  # before any scoring
    meta = dict(meta or {})
    known = None
    if evaluation.suite is not None:
        leakage = SUITES[evaluation.suite].leakage
        known = KnownLeak(evaluation.suite, leakage)
        meta |= {"split_kind": leakage.split_kind, "blind_baselines_known": leakage.blind_note}
    columns = scored_columns(dataset, config, meta.get("data", "the input"), log)
    assessed = assess(
        dataset.texts,
        labels,
        columns,
        evaluation.bootstrap,
        evaluation.seed,
        evaluation.blind,
        known,
        progress=config.compute.progress,
    )
    columns, results = assessed.columns, assessed.results
    buckets = None
    if evaluation.buckets:
        names = assign_buckets([count_words(t) for t in dataset.texts], evaluation.buckets)
        blind = [name for name in BLIND_COLUMNS if name in columns]
        buckets = metrics.evaluate_by_group(
            labels, columns, names, resamples=evaluation.bootstrap, seed=evaluation.seed, untested=blind
        )
    meta = {
        **meta,
        "model": config.model.name,
        "scores": str(config.output.path),
        "prepend_start": config.model.prepend_start,
        "methods": ",".join(config.scoring.methods),
        "k": list(config.scoring.k),
        "model_free_baselines": evaluation.blind.enabled,
    }
    paths = write_report(evaluation.report, labels, columns, results, meta, assessed.verdicts, buckets=buckets)
    return Evaluation(results, paths, assessed.verdicts)


def _column_scores(dataset: Dataset, config: RunConfig, column: str, data_name: str, log: Log) -> np.ndarray:
    """Scores ``dataset`` with ``column`` alone (resumably, into ``config.output.out``) and reads it back."""
    alone = replace(config, scoring=replace(config.scoring, methods=(column,), k=()))
    return scored_columns(dataset, alone, data_name, log)[column]


@dataclass(frozen=True)
class CalibrationRule:
    """The score column a threshold is for, and how it is picked: best validation ``accuracy``, or the highest TPR
    at ``target_fpr`` (rule ``fpr``)."""

    column: str
    rule: str = "accuracy"
    target_fpr: float | None = None

    def __post_init__(self) -> None:
        check_rule(self.rule, self.target_fpr)


def calibrate_file(
    dataset: Dataset,
    config: RunConfig,
    rule: CalibrationRule,
    settings: Mapping[str, Any],
    data_name: str = "the input",
    log: Log = _silent,
) -> Threshold:
    """A threshold for ``rule.column`` picked on labelled validation texts, scored (resumably) into
    ``config.output.out`` with that column alone; ``settings`` are what the threshold records and later checks."""
    require_both_classes(dataset.labels)  # before any scoring
    scores = _column_scores(dataset, config, rule.column, data_name, log)
    target_fpr = rule.target_fpr if rule.rule == "fpr" else None
    return calibrate(dataset.labels, scores, rule.column, rule.rule, target_fpr, dict(settings))


def classify_file(
    dataset: Dataset,
    config: RunConfig,
    threshold: Threshold,
    threshold_source: str,
    out: Path,
    data_name: str = "the input",
    log: Log = _silent,
) -> list[dict]:
    """Flags texts with a calibrated threshold: scores them (resumably, into ``config.output.out``) with the
    threshold's column, writes one row per text with its score and flag to ``out`` and the per-document rates
    beside it (``<out stem>.rates.json``); returns the rates, highest first."""
    scores = _column_scores(dataset, config, threshold.method, data_name, log)
    rates_path = out.with_name(out.stem + ".rates.json")
    return write_classification(
        out, rates_path, threshold, threshold_source, scores, dataset.ids, dataset.labels, dataset.groups
    )


@dataclass(frozen=True)
class UnlearningModels:
    """The models before and after unlearning (hub names, directories or .gguf files, each with its own
    tokenizer) and the one score column the audit compares."""

    before: str
    after: str
    column: str


UNLEARNING_ROLES = ("before", "after")


def unlearning_scores_path(report: Path, role: str) -> Path:
    """Where an unlearning audit keeps the scores under the model ``role`` unlearning."""
    return Path(report) / f"scores-{role}.jsonl"


def audit_unlearning_file(
    dataset: Dataset,
    config: RunConfig,
    models: UnlearningModels,
    rule: Rule,
    report: Path,
    data_name: str = "the input",
    log: Log = _silent,
) -> tuple[UnlearningAudit, list[Path]]:
    """Scores ``models.column`` under the model before and after unlearning (into ``report/scores-<role>.jsonl``,
    resumably), flags the texts that still look like members after, and writes the audit report."""
    report.mkdir(parents=True, exist_ok=True)
    column = models.column
    scores = {}
    for role, model in zip(UNLEARNING_ROLES, (models.before, models.after)):
        log(f"scoring {column} under the model {role} unlearning ({model})")
        output = replace(config.output, out=unlearning_scores_path(report, role))
        run = replace(config, output=output, model=replace(config.model, model=model))
        scores[role] = _column_scores(dataset, run, column, data_name, log)
    audit = audit_unlearning(
        column, scores["before"], scores["after"], rule, models.before, models.after, dataset.groups
    )
    return audit, write_audit_report(report, audit, dataset.ids, dataset.labels, data_name)


SUSPECT, VALIDATION = 1, 0


@dataclass(frozen=True)
class DatasetInferenceRun:
    """What a dataset-inference run records beside its result: where the two sets came from, the reference model
    given (if any), and the seed of the halves and the draws."""

    suspect: str
    validation: str
    seed: int = 0
    ref_model: str | None = None


def suspect_and_validation(suspect: Dataset, validation: Dataset) -> Dataset:
    """Both sets as one dataset, the suspect texts first, labelled SUSPECT and VALIDATION; refuses a set of fewer
    than ``MIN_TEXTS`` texts and a text in both."""
    for dataset, what in zip((suspect, validation), ("suspect", "validation")):
        if len(dataset.texts) < MIN_TEXTS:
            raise MiaFastError(
                f"the {what} set has {len(dataset.texts)} texts; dataset inference needs at least {MIN_TEXTS}"
            )
    check_disjoint_texts(suspect.texts, validation.texts)
    labels = [SUSPECT] * len(suspect.texts) + [VALIDATION] * len(validation.texts)
    return Dataset(texts=suspect.texts + validation.texts, ids=None, labels=labels)


def infer_dataset(
    combined: Dataset, config: RunConfig, run: DatasetInferenceRun, report: str | os.PathLike, log: Log = _silent
) -> tuple[DatasetInference, list[Path]]:
    """Dataset inference (Maini et al. 2024) on :func:`suspect_and_validation`'s ``combined`` sets: scores them
    (resumably, into ``config.output.out``) with every method of ``config`` as a feature, tests the suspect half
    against the validation half, and writes the result into ``report``. Returns the result and the files written."""
    columns = scored_columns(combined, config, f"{run.suspect} + {run.validation}", log)
    suspects = int(np.sum(np.asarray(combined.labels) == SUSPECT))
    result = dataset_inference(
        {f: v[:suspects] for f, v in columns.items()},
        {f: v[suspects:] for f, v in columns.items()},
        list(columns),
        seed=run.seed,
    )
    meta = {
        "suspect": run.suspect,
        "validation": run.validation,
        "model": config.model.name,
        "ref_model": run.ref_model,
        "features": ",".join(config.scoring.methods),
        "k": list(config.scoring.k),
        "seed": run.seed,
        "scores": str(config.output.path),
    }
    return result, write_dataset_inference(report, result, meta)


__all__ = [
    "CalibrationRule",
    "DatasetInferenceRun",
    "Evaluation",
    "EvaluationConfig",
    "UnlearningModels",
    "audit_unlearning_file",
    "calibrate_file",
    "classify_file",
    "evaluate_file",
    "infer_dataset",
    "suspect_and_validation",
]
