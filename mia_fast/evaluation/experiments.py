"""Controlled contamination: plant known members into a model, then check that each method finds them.

A corpus is shuffled and split in two halves, seeded and i.i.d.: members and non-members. The model
is fine-tuned on the members with the causal LM loss. Both halves are then scored by the
fine-tuned model; the untouched model serves as the reference model of ``ref``. The result is the
usual evaluation report. Every text is first cut to ``max_tokens`` tokens, so the model is trained
and scored on exactly the same texts.

The texts come from :mod:`mia_fast.evaluation.corpus`.
"""

from __future__ import annotations

import copy
import math
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.api import (
    ConRecallSettings,
    Detector,
    MethodSettings,
    ModelConfig,
    NeighborSettings,
    PacSettings,
    ProbeSettings,
    RecallSettings,
    SamiaSettings,
    Scores,
    ScoringConfig,
)
from mia_fast.data.files import Dataset
from mia_fast.data.outputs import ResultWriter
from mia_fast.engines.passes import REFERENCE
from mia_fast.evaluation.assessment import Assessment, BlindSettings, assess
from mia_fast.evaluation.corpus import prepare_texts, split_members
from mia_fast.evaluation.figures import plot_dev_auroc, pyplot, save_figure
from mia_fast.evaluation.probe_training import ProbeTraining, train_probe
from mia_fast.evaluation.report import write_report
from mia_fast.generation.finetune import FineTuning, TrainingDiverged, fine_tune
from mia_fast.generation.neighbors import WORD_DROP
from mia_fast.methods.probe import Probe
from mia_fast.methods.registry import DEMO_METHODS, MethodRequest, resolve_methods
from mia_fast.methods.setting_options import SettingOption
from mia_fast.methods.settings import recorded, setting_fields, settings_classes_of
from mia_fast.pipeline.models import LoadedModel
from mia_fast.scoring.method_runs import check_texts, passes_of, prepare_settings

# Texts drawn beside the experiment's for each prefix of ReCaLL and Con-ReCall, never scored: known
# non-members (never trained on) and, for Con-ReCall, known members (trained on).
PREFIX_SHOTS = 4
# Texts drawn beside the experiment's for the probe's training set (half of them the proxy's members).
PROBE_TEXTS = 32
# Texts drawn beside the experiment's as the known non-members of the methods that read --nonmembers (CAMIA's
# reference set, FSD's fine-tuning set): never trained on, never scored.
KNOWN_NONMEMBERS = 32
NONMEMBERS_KEY = "nonmembers"  # the setting key (--nonmembers) of those methods' known non-members
# With the probe, this share of the members and of the non-members is its dev set, not evaluated.
PROBE_DEV_SHARE = 0.25


@dataclass
class Experiment:
    """Everything the contamination report is made of."""

    members: list[str]  # evaluated members
    nonmembers: list[str]  # evaluated non-members
    settings: dict[str, Any]
    losses: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    dev_members: list[str] = field(default_factory=list)  # trained on, but only the probe's dev set
    dev_nonmembers: list[str] = field(default_factory=list)
    prefix_members: list[str] = field(default_factory=list)  # trained on, but only Con-ReCall's member prefix

    @property
    def trained(self) -> list[str]:
        """Every text the model is fine-tuned on."""
        return self.prefix_members + self.dev_members + self.members

    @property
    def texts(self) -> list[str]:
        return self.members + self.nonmembers

    @property
    def labels(self) -> np.ndarray:
        return np.r_[np.ones(len(self.members), np.int8), np.zeros(len(self.nonmembers), np.int8)]


def plot_losses(path: Path, losses: Sequence[float], steps_per_epoch: int) -> Path:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, marker=".")
    for epoch in range(1, math.ceil(len(losses) / max(steps_per_epoch, 1))):
        ax.axvline(epoch * steps_per_epoch + 0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("step (dotted lines: epochs)")
    ax.set_ylabel("causal LM loss on the members")
    ax.set_title("fine-tuning")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


@dataclass(frozen=True, kw_only=True)  # positional fields would shift when one is added
class ExperimentDesign:
    """How the experiment is drawn and judged: its fine-tuning, the texts split into members and non-members, the
    prefix shots of ReCaLL and Con-ReCall, the probe's training texts and training, the known non-members of the
    methods that read some (``--nonmembers``), the bootstrap resamples of the AUROC CI, and the model-free
    baselines beside the methods (whether they run, their refit shuffles)."""

    tuning: FineTuning = field(default_factory=FineTuning)
    texts: int = 64
    prefix_shots: int = PREFIX_SHOTS
    probe_texts: int = PROBE_TEXTS
    probe_training: ProbeTraining = field(default_factory=ProbeTraining)
    known_nonmembers: int = KNOWN_NONMEMBERS
    bootstrap: int = 1000
    blind: BlindSettings = BlindSettings()


@dataclass(frozen=True)
class ExperimentProgress:
    """What watches the experiment: each fine-tuning step and its loss, the scoring passes' tokens (as in
    :meth:`Detector.score`)."""

    on_step: Callable[[int, float], None] | None = None
    on_tokenized: Callable[[int], None] | None = None
    on_progress: Callable[[int], None] | None = None


def run_experiment(
    loaded: LoadedModel,
    corpus: Sequence[str],
    report_dir: str | Path,
    design: ExperimentDesign | None = None,
    scoring: ScoringConfig | None = None,
    corpus_name: str = "",
    progress: ExperimentProgress | None = None,
) -> tuple[Experiment, Assessment]:
    """Splits, fine-tunes ``loaded`` in place, scores, and writes the evaluation report into ``report_dir``.

    ``scoring`` gives the methods (default ``DEMO_METHODS``), k and the methods' settings (e.g. ``DcpddSettings``
    with a frequency table of a reference corpus, ``NeighborSettings``, ``SamiaSettings``). With ``recall`` or
    ``conrecall`` among the methods, ``design.prefix_shots`` more passages are drawn as the known non-member
    prefix: never trained on, never scored; with ``conrecall``, as many more as the known member prefix: trained
    on, never scored. With ``probe``, ``design.probe_texts`` more passages are its training set (half of them
    members of its proxy), and a ``PROBE_DEV_SHARE`` of the members and non-members is its dev set: fine-tuned on
    like every member, but not evaluated, for any method. With a method that reads known non-members (CAMIA, FSD),
    ``design.known_nonmembers`` more passages are drawn as them: never trained on, never scored. Every method that
    reads the reference model (``ref``, ``ezmia``, ``wbc``) gets the untouched model. ``neighbor`` takes its
    neighbours from its settings (default: ``WordDropNeighbors``, which needs no second model); SaMIA and PAC are
    seeded by the fine-tuning's seed unless their settings say otherwise. Returns the experiment and its assessment
    (the per-column metrics and the verdicts). On a diverging fine-tuning the report directory still gets the
    training log and a report saying so, and TrainingDiverged is raised.
    """
    design = design or ExperimentDesign()
    scoring = scoring or ScoringConfig(methods=DEMO_METHODS)
    progress = progress or ExperimentProgress()
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    requests = resolve_methods(scoring.methods)
    drawn = _draw(loaded, corpus, design, requests, corpus_name)
    experiment = drawn.experiment
    # Ready, and checked, before the fine-tuning: a masked LM for neighbours that fails to load stops it first.
    settings = prepare_settings(experiment_settings(scoring, design.tuning.seed), loaded)
    check_texts(settings, requests, [])
    reference = None
    if any(p.model == REFERENCE for p in passes_of(requests, MethodSettings())):
        reference = LoadedModel(
            copy.deepcopy(loaded.model), loaded.tokenizer, f"{loaded.name} (untouched)", loaded.device, loaded.dtype
        )
    steps_per_epoch = math.ceil(len(experiment.trained) / design.tuning.batch_size)
    try:
        experiment.losses = fine_tune(loaded, experiment.trained, design.tuning, on_step=progress.on_step)
    except TrainingDiverged as diverged:
        experiment.losses = diverged.losses
        _write_diverged_report(report_dir, experiment, diverged, steps_per_epoch)
        raise
    experiment.seconds["fine_tune"] = time.perf_counter() - started
    figures = [_losses_figure(report_dir, experiment.losses, steps_per_epoch)]
    probe = None
    if drawn.probe_pool:
        probe, figure = _train_probe(loaded, experiment, drawn.probe_pool, design, report_dir)
        figures.append(figure)
    scores = _score(loaded, reference, drawn, probe, replace(scoring, settings=settings), progress)
    return experiment, _report(report_dir, experiment, scores, design, figures)


@dataclass(frozen=True)
class _Drawn:
    """What an experiment draws from its corpus beside its members and non-members (each never scored): the known
    non-member prefix of ReCaLL and Con-ReCall, the probe's training pool, the known non-members of the methods that
    read some, and the (settings class, field) pairs that take those."""

    experiment: Experiment
    prefix: list[str]
    probe_pool: list[str]
    known_nonmembers: list[str]
    nonmember_settings: list[tuple[type, str]]


def _draw(
    loaded: LoadedModel,
    corpus: Sequence[str],
    design: ExperimentDesign,
    requests: Sequence[MethodRequest],
    corpus_name: str,
) -> _Drawn:
    """The experiment's texts, drawn and split for the methods ``requests``, and the settings it records of them."""
    tuning, texts, prefix_shots = design.tuning, design.texts, design.prefix_shots
    classes = settings_classes_of(r.method for r in requests)
    shots = prefix_shots if RecallSettings in classes else 0
    member_shots = prefix_shots if ConRecallSettings in classes else 0
    with_probe = ProbeSettings in classes
    nonmember_settings = [
        (cls, f.name)
        for cls in settings_classes_of(r.method for r in requests)
        for f in setting_fields(cls)
        if f.key == NONMEMBERS_KEY
    ]
    probe_texts = design.probe_texts if with_probe else 0
    known_count = design.known_nonmembers if nonmember_settings else 0
    extra = shots + member_shots + probe_texts + known_count
    # The first draws do not depend on how many more are drawn (a seeded permutation's prefix): the extras only add.
    drawn = prepare_texts(corpus, loaded.tokenizer, texts + extra, tuning.max_tokens, tuning.seed)
    prepared, prefix, rest = drawn[:texts], drawn[texts : texts + shots], drawn[texts + shots :]
    member_prefix, probe_pool = rest[:member_shots], rest[member_shots : member_shots + probe_texts]
    members, nonmembers = split_members(prepared, tuning.seed)
    held = max(2, int(len(members) * PROBE_DEV_SHARE)) if with_probe else 0
    settings = {
        "model": loaded.name,
        "corpus": corpus_name,
        "texts": len(prepared),
        "members": len(members) - held,
        "nonmembers": len(nonmembers) - held,
        **asdict(tuning),
        "device": str(loaded.device),
        "python": platform.python_version(),
    }
    extras = {"prefix_nonmember_shots": shots, "prefix_member_shots": member_shots, "known_nonmembers": known_count}
    settings.update({key: count for key, count in extras.items() if count})
    if with_probe:
        settings.update(
            probe_texts=len(probe_pool),
            probe_dev_members=held,
            probe_dev_nonmembers=held,
            probe_lr=design.probe_training.learning_rate,
        )
    experiment = Experiment(
        members[held:],
        nonmembers[held:],
        settings,
        dev_members=members[:held],
        dev_nonmembers=nonmembers[:held],
        prefix_members=member_prefix,
    )
    return _Drawn(experiment, prefix, probe_pool, rest[member_shots + probe_texts :], nonmember_settings)


def _losses_figure(report_dir: Path, losses: Sequence[float], steps_per_epoch: int) -> tuple[str, Path]:
    """The report's figure of the fine-tuning's losses."""
    return "Fine-tuning loss on the members", plot_losses(report_dir / "training_loss.png", losses, steps_per_epoch)


def _train_probe(
    loaded: LoadedModel, experiment: Experiment, probe_pool: list[str], design: ExperimentDesign, report_dir: Path
) -> tuple[Probe, tuple[str, Path]]:
    """The probe trained on its proxy split of ``probe_pool`` (dev: the held-out members and non-members), and the
    figure of its dev AUROC by layer."""
    started = time.perf_counter()
    proxy_members, proxy_nonmembers = split_members(probe_pool, design.tuning.seed + 7)
    probe_train = Dataset(
        proxy_members + proxy_nonmembers, None, [1] * len(proxy_members) + [0] * len(proxy_nonmembers)
    )
    held = len(experiment.dev_members)
    dev = Dataset(experiment.dev_members + experiment.dev_nonmembers, None, [1] * held + [0] * held)
    trained_probe = train_probe(loaded, probe_train, dev, design.probe_training)
    probe = trained_probe.probe
    experiment.settings.update(probe_layer=probe.layer, probe_normalization=probe.normalization)
    figure = (
        "Probe: dev AUROC by layer",
        plot_dev_auroc(report_dir / "probe_dev_auroc.png", trained_probe.dev_auroc, probe.layer),
    )
    experiment.seconds["probe_train"] = time.perf_counter() - started
    return probe, figure


def supplied_by_experiment(option: SettingOption) -> bool:
    """Whether an experiment supplies this setting itself: the known texts it draws from its corpus, and the probe
    it trains on its fine-tuned model."""
    return option.flag.texts_file or (option.flag.path and ProbeSettings in {f.owner for f in option.fields})


def experiment_settings(scoring: ScoringConfig, seed: int) -> MethodSettings:
    """The methods' settings of an experiment: ``scoring``'s, with SaMIA and PAC seeded by the fine-tuning's
    ``seed`` and neighbours made by word-drop from that seed (no second model) unless given."""
    defaults = MethodSettings(SamiaSettings(seed=seed), PacSettings(seed=seed), NeighborSettings(seed=seed))
    settings = defaults.replace(*scoring.settings)
    neighbors = settings.of(NeighborSettings)
    if neighbors.neighbors is None and neighbors.model is None:
        settings = settings.replace(replace(neighbors, model=WORD_DROP))
    return settings


def _score(
    loaded: LoadedModel,
    reference: LoadedModel | None,
    drawn: _Drawn,
    probe: Probe | None,
    scoring: ScoringConfig,
    progress: ExperimentProgress,
) -> Scores:
    """Every method's scores of the experiment's texts, each method's settings (``scoring``'s, made ready)
    completed with what was drawn for it; those given a flag and not at their default are recorded in the
    experiment's settings."""
    experiment, started = drawn.experiment, time.perf_counter()
    method_settings = scoring.settings
    for cls in settings_classes_of(r.method for r in resolve_methods(scoring.methods)):
        for f in setting_fields(cls):
            value = recorded(getattr(method_settings.of(cls), f.name))
            if f.spec.flag and not f.spec.flag.texts_file and value != recorded(f.default):
                experiment.settings[f.key] = value
    method_settings = method_settings.replace(
        RecallSettings(prefix_nonmembers=drawn.prefix),
        replace(method_settings.of(ConRecallSettings), prefix_members=experiment.prefix_members),
        replace(method_settings.of(ProbeSettings), probe=probe),
        *(
            replace(method_settings.of(cls), **{name: tuple(drawn.known_nonmembers)})
            for cls, name in drawn.nonmember_settings
        ),
    )
    detector = Detector(ModelConfig(loaded, ref_model=reference), method_settings)
    scores = detector.score(
        experiment.texts,
        scoring.methods,
        scoring.k,
        on_tokenized=progress.on_tokenized,
        on_progress=progress.on_progress,
    )
    experiment.seconds["score"] = time.perf_counter() - started
    return scores


def _report(
    report_dir: Path, experiment: Experiment, scores: Scores, design: ExperimentDesign, figures: list[tuple[str, Path]]
) -> Assessment:
    """The assessment of the scores, written with the experiment's settings and figures into ``report_dir``."""
    assessed = assess(experiment.texts, experiment.labels, scores, design.bootstrap, design.tuning.seed, design.blind)
    columns, results = assessed.columns, assessed.results
    meta = {
        **experiment.settings,
        "first_loss": experiment.losses[0],
        "last_loss": experiment.losses[-1],
        "steps": len(experiment.losses),
        **{f"seconds_{k}": round(v, 1) for k, v in experiment.seconds.items()},
    }
    write_report(report_dir, experiment.labels, columns, results, meta, assessed.verdicts, figures=figures)
    _write_scores(report_dir / "scores.jsonl", experiment, columns)
    return assessed


def _write_scores(path: Path, experiment: Experiment, columns: dict[str, np.ndarray]) -> None:
    writer = ResultWriter(path, ["id", "label", "text", *columns], overwrite=True)
    writer.write(
        [
            {"id": i, "label": int(label), "text": text, **{name: float(values[i]) for name, values in columns.items()}}
            for i, (text, label) in enumerate(zip(experiment.texts, experiment.labels))
        ]
    )
    writer.close()


def _write_diverged_report(
    report_dir: Path, experiment: Experiment, diverged: TrainingDiverged, steps_per_epoch: int
) -> None:
    finite = [loss if math.isfinite(loss) else float("nan") for loss in experiment.losses]
    plot_losses(report_dir / "training_loss.png", finite, steps_per_epoch)
    lines = [
        "# mia-fast contamination experiment: stopped",
        "",
        f"**{diverged}.** Nothing was scored.",
        "",
        "| step | loss |",
        "|---|---|",
        *(f"| {i} | {loss} |" for i, loss in enumerate(experiment.losses, start=1)),
        "",
        "![fine-tuning loss](training_loss.png)",
        "",
        "| setting | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in experiment.settings.items()),
        "",
    ]
    (report_dir / "report.md").write_text("\n".join(lines))
