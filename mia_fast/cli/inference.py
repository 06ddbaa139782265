"""``mia-fast dataset-inference``: is a set of texts in the training data, given a validation set known not to be?"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from mia_fast.cli.options import (
    add_model_options,
    add_scoring_options,
    fractions,
    method_list,
    seed,
)
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import run_config, stderr
from mia_fast.cli.runfile import write_report_run_file
from mia_fast.data import Fields, read_dataset
from mia_fast.data.gate import Output
from mia_fast.evaluation.dataset_inference import check_distinct_files
from mia_fast.generation.neighbors import WORD_DROP
from mia_fast.methods.reference import REFERENCE_RATIO

# Maini et al.'s features, as far as the engine has them: likelihoods, Min-K% and Min-K%++ over k,
# zlib and lowercase ratios, and a perturbation (word-drop neighbours); ref when a reference model is given.
FEATURE_METHODS = "loss,zlib,mink,minkpp,lowercase,neighbor"
FEATURE_KS = "0.05,0.1,0.2,0.3,0.4,0.5,0.6"
FEATURE_NEIGHBORS = 5

# What the command's --help says of it (argparse wraps it anew).
DESCRIPTION = """Dataset inference (Maini et al. 2024): scores every text of SUSPECT and VALIDATION with many
methods, learns a linear model of suspect against validation on half of each, and t-tests its outputs on the other
halves. VALIDATION must come from SUSPECT's distribution and be known not to be trained on."""


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suspect", help="the texts in question (.jsonl[.gz], .json[.gz], .csv, .parquet)")
    parser.add_argument("validation", help="texts of the same distribution known not to be in the training data")
    parser.add_argument("--text-field", default="text")
    parser.add_argument(
        "--report", required=True, help="directory for dataset_inference.json, p_values.png, report.md and the scores"
    )
    parser.add_argument("--seed", type=seed, default=0, help="the halves and the draws (default 0)")
    parser.add_argument(
        "--methods",
        type=method_list,
        default=FEATURE_METHODS,
        help=f"the features: comma-separated methods (default {FEATURE_METHODS}; ref is added with --ref-model)",
    )
    parser.add_argument(
        "--k", type=fractions, default=fractions(FEATURE_KS), help=f"fractions for mink/minkpp (default {FEATURE_KS})"
    )
    add_model_options(parser)
    add_scoring_options(parser, methods=False)
    parser.set_defaults(
        neighbor_field=None,
        neighbor_model=WORD_DROP,
        neighbor_count=FEATURE_NEIGHBORS,
        handler=command_dataset_inference,
    )


def command_dataset_inference(args: argparse.Namespace) -> None:
    from mia_fast.evaluation.workflows import DatasetInferenceRun, infer_dataset, suspect_and_validation  # noqa: PLC0415 (torch: 1.5 s at start-up; --help loads none)

    report = Path(args.report)
    check_command_outputs(
        args,
        Output(report, "--report", folder=True, resumable=True),
        Output(report / "scores.jsonl", "--report", staged=True, resumable=True),
    )
    check_distinct_files(args.suspect, args.validation)
    texts_only = Fields(args.text_field, id=None, label=None)
    sets = [read_dataset(path, texts_only) for path in (args.suspect, args.validation)]
    combined = suspect_and_validation(*sets)
    with_reference = [REFERENCE_RATIO] if args.ref_model and REFERENCE_RATIO not in args.methods.split(",") else []
    methods = args.methods.split(",") + with_reference
    config = run_config(args, combined, report / "scores.jsonl")
    output = replace(config.output, label_field="suspect")
    config = replace(config, output=output, scoring=replace(config.scoring, methods=tuple(methods)))
    run = DatasetInferenceRun(args.suspect, args.validation, args.seed, args.ref_model)
    result, written = infer_dataset(combined, config, run, report, log=stderr)
    written = [*written, write_report_run_file(report, args)]
    print(result.summary())
    print(
        "held-out texts per set: "
        + "  ".join(f"{n}: p={p:.3g}" for n, p in zip(result.test.sizes, result.test.p_values))
    )
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
