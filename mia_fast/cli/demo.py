"""``mia-fast demo``: the controlled-contamination experiment, end to end, on any machine."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from mia_fast.cli.options import (
    add_blind_permutations_option,
    add_method_settings,
    add_model_options,
    add_overwrite_and_quiet,
    batch_texts,
    bounded,
    epochs,
    fractions,
    learning_rate,
    method_list,
    resamples,
    seed,
    token_count,
)
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import method_settings
from mia_fast.cli.runfile import write_report_run_file
from mia_fast.data.gate import Output
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.assessment import Assessment, BlindSettings
from mia_fast.evaluation.corpus import MIN_TEXTS, read_corpus, stdlib_corpus
from mia_fast.evaluation.experiments import (
    DEMO_METHODS,
    PREFIX_SHOTS,
    PROBE_TEXTS,
    Experiment,
    ExperimentDesign,
    ExperimentProgress,
    FineTuning,
    run_experiment,
    supplied_by_experiment,
)
from mia_fast.evaluation.probe_training import ProbeTraining
from mia_fast.evaluation.report import format_table
from mia_fast.generation.finetune import TrainingDiverged
from mia_fast.methods.settings import Range
from mia_fast.pipeline.models import load_model
from mia_fast.scoring.config import ScoringConfig

# What the command's --help says of it (argparse wraps it anew).
DESCRIPTION = """Splits a corpus into members and non-members (seeded, i.i.d.), fine-tunes the model on the members,
scores both halves with the fine-tuned model (the untouched model is the reference model of the methods that read
one) and writes the evaluation report. Default corpus: the Python standard library's docstrings."""


def add_command(name: str, demo: argparse.ArgumentParser) -> None:
    # The reference is the untouched model itself; the model is fine-tuned, so whole (no --device-map).
    add_model_options(demo, reference=False, spread=False)
    demo.add_argument("--report", default="report", help="report directory (default: report)")
    demo.add_argument(
        "--corpus",
        help="texts to split (.txt a text per line, .jsonl[.gz], .json.gz, .parquet); default: stdlib docstrings",
    )
    demo.add_argument("--text-field", default="text")
    # The demo fine-tunes on half its texts: 100,000 is already hours of work, more is a typo.
    demo.add_argument(
        "--texts",
        type=bounded(Range(MIN_TEXTS, 100_000, whole=True)),
        default=64,
        help="texts drawn from the corpus, half of them members (default 64)",
    )
    demo.add_argument("--epochs", type=epochs, default=FineTuning.epochs)
    demo.add_argument("--lr", type=learning_rate, default=FineTuning.learning_rate, help="learning rate (default 1e-4)")
    demo.add_argument("--batch-size", type=batch_texts, default=FineTuning.batch_size)
    demo.add_argument(
        "--max-tokens",
        type=token_count,
        default=FineTuning.max_tokens,
        help="each text is cut to this many tokens (default 128)",
    )
    demo.add_argument("--seed", type=seed, default=FineTuning.seed)
    demo.add_argument("--methods", type=method_list, default=",".join(DEMO_METHODS))
    demo.add_argument("--k", type=fractions, help="fractions for mink/minkpp (default 0.1,...,1.0)")
    # A prefix of more than 100 passages outgrows any context window.
    demo.add_argument(
        "--prefix-shots",
        type=bounded(Range(1, 100, whole=True)),
        default=PREFIX_SHOTS,
        help="for recall and conrecall: passages drawn for each prefix, known non-members and (conrecall) known "
        f"members (default {PREFIX_SHOTS})",
    )
    demo.add_argument(
        "--probe-texts",
        type=bounded(Range(1, 100_000, whole=True)),
        default=PROBE_TEXTS,
        help=f"for probe: passages drawn as its training set, half of them its proxy's members (default {PROBE_TEXTS})",
    )
    demo.add_argument(
        "--probe-lr",
        type=learning_rate,
        default=ProbeTraining.learning_rate,
        help="for probe: its proxy's fine-tuning learning rate (default 1e-3)",
    )
    demo.add_argument("--bootstrap", type=resamples, default=1000)
    demo.add_argument(
        "--no-blind",
        dest="blind",
        action="store_false",
        help="leave out the model-free baselines (bag of words, dates, n-grams)",
    )
    add_blind_permutations_option(demo)
    add_overwrite_and_quiet(demo, "write into a report directory that is not empty")
    # The experiment draws the known texts and trains the probe itself; the other settings are the registry's.
    add_method_settings(demo.add_argument_group("method settings"), supplied=supplied_by_experiment)
    demo.set_defaults(handler=command_demo)


class _DemoBars:
    """The demo's progress: a bar over the fine-tuning's steps, then one over the scored tokens."""

    def __init__(self, steps: int, *, quiet: bool) -> None:
        self.quiet = quiet
        self.bars = [self._bar(steps, "fine-tuning on the members", "step")]

    def _bar(self, total: int, desc: str, unit: str) -> Any:
        return tqdm(total=total, desc=desc, unit=unit, disable=self.quiet, file=sys.stderr, dynamic_ncols=True)

    def on_step(self, step: int, loss: float) -> None:
        self.bars[-1].set_postfix_str(f"loss {loss:.3f}")
        self.bars[-1].update(1)

    def on_tokenized(self, tokens: int) -> None:
        if len(self.bars) == 1:
            self.bars[0].close()
            self.bars.append(self._bar(0, "scoring members and non-members", "tok"))
        self.bars[-1].total += tokens
        self.bars[-1].refresh()

    def on_progress(self, tokens: int) -> None:
        self.bars[-1].update(tokens)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


def command_demo(args: argparse.Namespace) -> None:
    report = Path(args.report)
    check_command_outputs(args, Output(report, "--report", folder=True))
    corpus = read_corpus(args.corpus, args.text_field) if args.corpus else stdlib_corpus()
    corpus_name = args.corpus or "Python standard library docstrings"
    methods = [m for m in args.methods.split(",") if m]
    if args.method_seed is None:  # the methods' draws follow the demo's --seed unless given their own
        args.method_seed = args.seed
    # Fine-tuning wants fp32 weights; the dtype option still wins if given.
    loaded = load_model(args.model, gguf=args.gguf, device=args.device, dtype=args.dtype or "fp32")
    tuning = FineTuning(args.epochs, args.lr, args.batch_size, args.max_tokens, args.seed)
    bars = _DemoBars(args.epochs * -(-(args.texts // 2) // args.batch_size), quiet=args.quiet)
    try:
        design = ExperimentDesign(
            tuning=tuning,
            texts=args.texts,
            prefix_shots=args.prefix_shots,
            probe_texts=args.probe_texts,
            probe_training=ProbeTraining(learning_rate=args.probe_lr, seed=args.seed),
            bootstrap=args.bootstrap,
            blind=BlindSettings(args.blind, args.blind_permutations),
        )
        scoring = ScoringConfig(methods=tuple(methods), settings=method_settings(args))
        if args.k:
            scoring = replace(scoring, k=tuple(args.k))
        progress = ExperimentProgress(bars.on_step, bars.on_tokenized, bars.on_progress)
        experiment, assessed = run_experiment(loaded, corpus, report, design, scoring, corpus_name, progress)
    except TrainingDiverged as diverged:
        raise MiaFastError(f"{diverged} (--lr {args.lr:g}); nothing was scored, the losses are in {report}") from None
    finally:
        bars.close()
    write_report_run_file(report, args)
    _print_summary(args, experiment, assessed, report)


def _print_summary(args: argparse.Namespace, experiment: Experiment, assessed: Assessment, report: Path) -> None:
    print(
        f"{len(experiment.trained)} members fine-tuned for {args.epochs} epoch(s) at lr {args.lr:g}: "
        f"loss {experiment.losses[0]:.3f} -> {experiment.losses[-1]:.3f}; "
        f"{len(experiment.nonmembers) + len(experiment.dev_nonmembers)} non-members held out"
    )
    if experiment.dev_members:
        print(
            f"probe: layer {experiment.settings['probe_layer']} picked on a dev set of {len(experiment.dev_members)} "
            "members and "
            f"{len(experiment.dev_nonmembers)} non-members, which no method is evaluated on"
        )
    print(format_table(assessed.results, assessed.verdicts))
    print(
        f"report: {report / 'report.html'} (also report.md, roc.png, histograms.png, metrics.json, scores.jsonl, "
        "run.toml)",
        file=sys.stderr,
    )
