"""``mia-fast audit-unlearning``: which texts still look like members of a model after it "unlearned" them
(Min-K% Prob, §7)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mia_fast.cli.options import add_device_options, add_input_options, add_scoring_options, fraction, load_input
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import checked_threshold, input_name, run_config, single_column, stderr
from mia_fast.cli.runfile import write_report_run_file
from mia_fast.data.gate import Output
from mia_fast.evaluation.unlearning import DEFAULT_RATIO, RatioRule, ThresholdRule, format_table

# What the command's --help says of it (argparse wraps it anew).
DESCRIPTION = """Scores every text under the model before and after unlearning (each with its own tokenizer) and
flags the texts that still look like members of the model after: by a calibrated threshold on the after score, or
(default) when the after score kept at least --ratio of the before score. Meant for the texts that were supposed to
be unlearned: a text the model never saw keeps its score too."""


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    models = parser.add_argument_group("models")
    models.add_argument(
        "--before",
        required=True,
        metavar="MODEL",
        help="the model before unlearning: hub name, directory or .gguf file",
    )
    models.add_argument(
        "--after", required=True, metavar="MODEL", help="the model after unlearning: hub name, directory or .gguf file"
    )
    add_device_options(models)
    add_scoring_options(parser, methods=False)
    audit = parser.add_argument_group("audit")
    audit.add_argument("--method", required=True, help="one score column, e.g. mink_0.2 or loss")
    audit.add_argument(
        "--report",
        required=True,
        help="directory for audit.jsonl, groups.json, before_after.png, report.md and the scores",
    )
    rule = audit.add_mutually_exclusive_group()
    rule.add_argument(
        "--threshold",
        metavar="FILE",
        help="flag texts whose after score reaches this threshold ('mia-fast calibrate' on the model after)",
    )
    rule.add_argument(
        "--ratio",
        type=fraction,
        help=f"flag texts whose after score kept at least this share of the before score (default {DEFAULT_RATIO}; "
        "mean log-probabilities only: loss, mink_K)",
    )
    parser.set_defaults(handler=command_audit_unlearning)


def command_audit_unlearning(args: argparse.Namespace) -> None:
    from mia_fast.evaluation.workflows import (  # noqa: PLC0415 (torch: 1.5 s at start-up; --help loads none)
        UNLEARNING_ROLES,
        UnlearningModels,
        audit_unlearning_file,
        unlearning_scores_path,
    )

    column = single_column(args.method)
    report = Path(args.report)
    check_command_outputs(
        args,
        Output(report, "--report", folder=True, resumable=True),
        *(
            Output(unlearning_scores_path(report, role), "--report", staged=True, resumable=True)
            for role in UNLEARNING_ROLES
        ),
    )
    if args.threshold:
        rule = ThresholdRule(checked_threshold(args, report, model=args.after), args.threshold)
    else:
        rule = RatioRule(column, DEFAULT_RATIO if args.ratio is None else args.ratio)
    dataset = load_input(args)
    config = run_config(args, dataset, report, column, model=args.before)
    models = UnlearningModels(args.before, args.after, column)
    audit, paths = audit_unlearning_file(dataset, config, models, rule, report, input_name(args), log=stderr)
    paths.append(write_report_run_file(report, args))
    print(format_table(audit))
    stderr("wrote " + ", ".join(str(p) for p in paths))
