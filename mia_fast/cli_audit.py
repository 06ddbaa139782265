"""``mia-fast calibrate`` and ``mia-fast classify``: a threshold picked on a labelled validation set,
applied to new texts, with per-document contamination rates (the share of a book's snippets flagged)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from mia_fast.cli_common import add_input_options, add_model_options, add_scoring_options, input_name, load_input, model_name, read_scores, run_scoring
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods
from mia_fast.thresholds import RULES, Threshold, calibrate, contamination_rates, flag, require_both_classes

# Settings that change what a score means: a threshold only transfers when they are equal.
_SCORE_SETTINGS = ("model", "prepend_start", "max_words", "a", "freq_table", "ref_model")


def _score_settings(args: argparse.Namespace) -> dict:
    values = {name: getattr(args, name, None) for name in _SCORE_SETTINGS}
    values["model"] = model_name(args)
    return values


def _single_column(method: str) -> str:
    requests = resolve_methods([method], [])
    columns = [c for r in requests for c in r.columns]
    if len(columns) != 1:
        raise MiaFastError(f"--method takes one score column, e.g. mink_0.2 or loss; {method!r} is not one")
    return columns[0]


def add_audit_commands(commands: argparse._SubParsersAction) -> None:
    calibrate_parser = commands.add_parser("calibrate", help="pick a decision threshold for one method on a labelled validation set")
    add_input_options(calibrate_parser)
    add_model_options(calibrate_parser)
    add_scoring_options(calibrate_parser, methods=False)
    calibrate_parser.add_argument("--method", required=True, help="one score column, e.g. minkpp_0.2, mink_0.2, loss")
    calibrate_parser.add_argument("--rule", choices=RULES, default="accuracy", help="best validation accuracy, or the highest TPR at --target-fpr")
    calibrate_parser.add_argument("--target-fpr", type=float, default=0.05, help="for --rule fpr (default 0.05)")
    calibrate_parser.add_argument("--out", required=True, help="the threshold file (JSON); the validation scores go beside it")
    calibrate_parser.set_defaults(handler=command_calibrate)

    classify = commands.add_parser("classify", help="flag texts with a calibrated threshold; contamination rate per document")
    add_input_options(classify)
    add_model_options(classify)
    add_scoring_options(classify, methods=False)
    classify.add_argument("--threshold", required=True, help="a file written by 'mia-fast calibrate'")
    classify.add_argument("--method", help="check that the threshold is for this method")
    classify.add_argument("--out", required=True, help="one row per text with its score and flag (.jsonl); the rates go beside it")
    classify.add_argument("--top", type=int, default=20, help="documents shown in the printed table")
    classify.set_defaults(handler=command_classify)


def _scores_path(out: Path) -> Path:
    return out.with_name(out.stem + ".scores.jsonl")


def command_calibrate(args: argparse.Namespace) -> None:
    column = _single_column(args.method)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise MiaFastError(f"{out} exists; pass --overwrite to replace it")
    dataset = load_input(args, require_labels=True)
    require_both_classes(dataset.labels)  # before any scoring
    args.methods, args.k = column, []
    scores_path = _scores_path(out)
    run_scoring(args, dataset, scores_path)
    scores = read_scores(scores_path, [column])[column]
    settings = _score_settings(args) | {"data": input_name(args)}
    threshold = calibrate(dataset.labels, scores, column, args.rule, args.target_fpr if args.rule == "fpr" else None, settings)
    threshold.save(out)
    v = threshold.validation
    print(f"{column} >= {threshold.value:.6g} flags a member ({args.rule} rule): validation accuracy {v['accuracy']:.3f}, "
          f"TPR {v['tpr']:.3f}, FPR {v['fpr']:.3f} on {v['members']} members and {v['nonmembers']} non-members")
    print(f"wrote {out} (validation scores: {scores_path})", file=sys.stderr)


def command_classify(args: argparse.Namespace) -> None:
    threshold = Threshold.load(args.threshold)
    if args.method and _single_column(args.method) != threshold.method:
        raise MiaFastError(f"{args.threshold} is a threshold for {threshold.method}, not {args.method}; calibrate one for {args.method}")
    mismatched = {k: (threshold.settings.get(k), v) for k, v in _score_settings(args).items() if k in threshold.settings and threshold.settings[k] != v}
    if mismatched:
        details = ", ".join(f"{k}: calibrated with {a!r}, now {b!r}" for k, (a, b) in mismatched.items())
        raise MiaFastError(f"{args.threshold} was calibrated under other scoring settings ({details}); scores would not be comparable")
    out = Path(args.out)
    rates_path = out.with_name(out.stem + ".rates.json")
    for path in (out, rates_path):
        if path.exists() and not args.overwrite:
            raise MiaFastError(f"{path} exists; pass --overwrite to replace it")
    dataset = load_input(args)
    args.methods, args.k = threshold.method, []
    scores_path = _scores_path(out)
    run_scoring(args, dataset, scores_path)
    scores = read_scores(scores_path, [threshold.method])[threshold.method]
    flags = flag(scores, threshold)
    scored = ~(scores != scores)  # not NaN
    groups = dataset.groups or ["all"] * len(scores)
    with open(out, "w", encoding="utf-8") as f:
        for i, score in enumerate(scores):
            row = {"id": dataset.ids[i] if dataset.ids is not None else i, "group": groups[i],
                   threshold.method: None if math.isnan(score) else float(score), "member": bool(flags[i]) if scored[i] else None}
            if dataset.labels is not None:
                row["label"] = dataset.labels[i]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    rates = contamination_rates(groups, flags, scored)
    rates_path.write_text(json.dumps({"threshold": str(args.threshold), "method": threshold.method, "value": threshold.value, "groups": rates}, indent=1) + "\n")
    print(f"{'document':<40} {'snippets':>8} {'flagged':>8} {'rate':>7}")
    for entry in rates[: args.top]:
        print(f"{entry['group'][:40]:<40} {entry['snippets']:>8} {entry['flagged']:>8} {entry['rate']:>7.1%}")
    if len(rates) > args.top:
        print(f"... {len(rates) - args.top} more in {rates_path}")
    total_flagged, total_scored = int(flags[scored].sum()), int(scored.sum())
    print(f"{total_flagged} of {total_scored} scored texts flagged ({total_flagged / max(total_scored, 1):.1%}) with {threshold.method} >= {threshold.value:.6g}")
    print(f"wrote {out} and {rates_path}", file=sys.stderr)
