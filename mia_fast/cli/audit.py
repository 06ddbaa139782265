"""``mia-fast calibrate`` and ``mia-fast classify``: a threshold picked on a labelled validation set,
applied to new texts, with per-document contamination rates (the share of a book's snippets flagged)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mia_fast.cli.options import (
    add_input_options,
    add_model_options,
    add_scoring_options,
    input_name,
    load_input,
    score_into,
    score_settings,
    single_column,
)
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.thresholds import RULES


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
        parser.add_argument("--target-fpr", type=float, default=0.05, help="for --rule fpr (default 0.05)")
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
    parser.add_argument("--top", type=int, default=20, help="documents shown in the printed table")
    parser.set_defaults(handler=command_classify)


def _scores_path(out: Path) -> Path:
    return out.with_name(out.stem + ".scores.jsonl")


def command_calibrate(args: argparse.Namespace) -> None:
    from mia_fast.data import read_scores
    from mia_fast.evaluation.thresholds import calibrate, require_both_classes

    column = single_column(args.method)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise MiaFastError(f"{out} exists; pass --overwrite to replace it")
    dataset = load_input(args, require_labels=True)
    require_both_classes(dataset.labels)  # before any scoring
    args.methods, args.k = column, []
    scores_path = _scores_path(out)
    score_into(args, dataset, scores_path)
    scores = read_scores(scores_path, [column])[column]
    settings = score_settings(args) | {"data": input_name(args)}
    threshold = calibrate(
        dataset.labels, scores, column, args.rule, args.target_fpr if args.rule == "fpr" else None, settings
    )
    threshold.save(out)
    v = threshold.validation
    print(
        f"{column} >= {threshold.value:.6g} flags a member ({args.rule} rule): validation accuracy {v['accuracy']:.3f}, "
        f"TPR {v['tpr']:.3f}, FPR {v['fpr']:.3f} on {v['members']} members and {v['nonmembers']} non-members"
    )
    print(f"wrote {out} (validation scores: {scores_path})", file=sys.stderr)


def command_classify(args: argparse.Namespace) -> None:
    from mia_fast.data import read_scores
    from mia_fast.evaluation.thresholds import Threshold, write_classification

    threshold = Threshold.load(args.threshold)
    threshold.check_use(args.threshold, score_settings(args), single_column(args.method) if args.method else None)
    out = Path(args.out)
    rates_path = out.with_name(out.stem + ".rates.json")
    for path in (out, rates_path):
        if path.exists() and not args.overwrite:
            raise MiaFastError(f"{path} exists; pass --overwrite to replace it")
    dataset = load_input(args)
    args.methods, args.k = threshold.method, []
    scores_path = _scores_path(out)
    score_into(args, dataset, scores_path)
    scores = read_scores(scores_path, [threshold.method])[threshold.method]
    rates = write_classification(
        out, rates_path, threshold, str(args.threshold), scores, dataset.ids, dataset.labels, dataset.groups
    )
    print(f"{'document':<40} {'snippets':>8} {'flagged':>8} {'rate':>7}")
    for entry in rates[: args.top]:
        print(f"{entry['group'][:40]:<40} {entry['snippets']:>8} {entry['flagged']:>8} {entry['rate']:>7.1%}")
    if len(rates) > args.top:
        print(f"... {len(rates) - args.top} more in {rates_path}")
    flagged, scored = sum(e["flagged"] for e in rates), sum(e["scored"] for e in rates)
    print(
        f"{flagged} of {scored} scored texts flagged ({flagged / max(scored, 1):.1%}) with {threshold.method} >= {threshold.value:.6g}"
    )
    print(f"wrote {out} and {rates_path}", file=sys.stderr)
