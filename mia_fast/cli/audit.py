"""``mia-fast calibrate`` and ``mia-fast classify``: a threshold picked on a labelled validation set,
applied to new texts, with per-document contamination rates (the share of a book's snippets flagged)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mia_fast.cli.options import add_input_options, add_model_options, add_scoring_options, bounded, load_input
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import checked_threshold, input_name, run_config, score_settings, single_column, stderr
from mia_fast.data.gate import Output
from mia_fast.evaluation.thresholds import RULES
from mia_fast.methods.settings import Range


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    add_model_options(parser)
    add_scoring_options(parser, methods=False)
    if name == "calibrate":
        parser.add_argument("--method", required=True, help="one score column, e.g. minkpp_0.2, mink_0.2, loss")
        parser.add_argument(
            "--rule",
            choices=RULES,
            default="accuracy",
            help="best validation accuracy, or the highest TPR at --target-fpr",
        )
        parser.add_argument(
            "--target-fpr", type=bounded(Range(0, 1)), default=0.05, help="for --rule fpr (default 0.05)"
        )
        parser.add_argument(
            "--out", required=True, help="the threshold file (JSON); the validation scores go beside it"
        )
        parser.set_defaults(handler=command_calibrate)
        return
    parser.add_argument("--threshold", required=True, help="a file written by 'mia-fast calibrate'")
    parser.add_argument("--method", help="check that the threshold is for this method")
    parser.add_argument(
        "--out", required=True, help="one row per text with its score and flag (.jsonl); the rates go beside it"
    )
    parser.add_argument(
        "--top", type=bounded(Range(1, 10**6, whole=True)), default=20, help="documents shown in the printed table"
    )
    parser.set_defaults(handler=command_classify)


def _scores_path(out: Path) -> Path:
    return out.with_name(out.stem + ".scores.jsonl")


def command_calibrate(args: argparse.Namespace) -> None:
    from mia_fast.evaluation.workflows import CalibrationRule, calibrate_file  # noqa: PLC0415 (torch: 1.5 s at start-up; --help loads none)

    column = single_column(args.method)
    out = Path(args.out)
    check_command_outputs(args, Output(out), Output(_scores_path(out), staged=True, resumable=True))
    dataset = load_input(args, require_labels=True)
    config = run_config(args, dataset, _scores_path(out), methods=column)
    settings = score_settings(config, args) | {"data": input_name(args)}
    rule = CalibrationRule(column, args.rule, args.target_fpr)
    threshold = calibrate_file(dataset, config, rule, settings, input_name(args), log=stderr)
    threshold.save(out)
    v = threshold.validation
    print(
        f"{column} >= {threshold.value:.6g} flags a member ({args.rule} rule): validation accuracy "
        f"{v['accuracy']:.3f}, "
        f"TPR {v['tpr']:.3f}, FPR {v['fpr']:.3f} on {v['members']} members and {v['nonmembers']} non-members"
    )
    print(f"wrote {out} (validation scores: {config.output.path})", file=sys.stderr)


def command_classify(args: argparse.Namespace) -> None:
    from mia_fast.evaluation.workflows import classify_file  # noqa: PLC0415 (torch: 1.5 s at start-up; --help loads none)

    out = Path(args.out)
    rates_path = out.with_name(out.stem + ".rates.json")
    check_command_outputs(args, Output(out), Output(rates_path), Output(_scores_path(out), staged=True, resumable=True))
    threshold = checked_threshold(args, out)
    dataset = load_input(args)
    config = run_config(args, dataset, _scores_path(out), threshold.method)
    rates = classify_file(dataset, config, threshold, str(args.threshold), out, input_name(args), log=stderr)
    print(f"{'document':<40} {'snippets':>8} {'flagged':>8} {'rate':>7}")
    for entry in rates[: args.top]:
        print(f"{entry['group'][:40]:<40} {entry['snippets']:>8} {entry['flagged']:>8} {entry['rate']:>7.1%}")
    if len(rates) > args.top:
        print(f"... {len(rates) - args.top} more in {rates_path}")
    flagged, scored = sum(e["flagged"] for e in rates), sum(e["scored"] for e in rates)
    print(
        f"{flagged} of {scored} scored texts flagged ({flagged / max(scored, 1):.1%}) "
        f"with {threshold.method} >= {threshold.value:.6g}"
    )
    print(f"wrote {out} and {rates_path}", file=sys.stderr)
