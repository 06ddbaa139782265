"""``mia-fast score`` and ``mia-fast eval``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mia_fast.cli.options import (
    add_input_options,
    add_model_options,
    add_scoring_options,
    input_name,
    ints,
    load_input,
    model_name,
    score_into,
)
from mia_fast.errors import MiaFastError


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    add_model_options(parser)
    add_scoring_options(parser)
    if name == "score":
        parser.add_argument("--out", required=True, help="scores: .jsonl, .csv or .parquet (one row per input row, in order)")
        parser.set_defaults(handler=command_score)
        return
    parser.add_argument("--report", help="directory for metrics.json, figures, report.md and report.html")
    parser.add_argument("--out", help="scores file (default: REPORT/scores.jsonl)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUROC CI")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--buckets", type=ints, help="word-length bucket edges, e.g. 32,64,128,256: metrics per bucket too")
    parser.add_argument("--compare", nargs=2, metavar=("REPORT_A", "REPORT_B"), help="print the differences between two report directories and stop")
    parser.set_defaults(handler=command_eval)


def command_score(args: argparse.Namespace) -> None:
    score_into(args, load_input(args), Path(args.out))


def command_eval(args: argparse.Namespace) -> None:
    from mia_fast.data import read_scores
    from mia_fast.data.text import assign_buckets, count_words
    from mia_fast.evaluation import metrics
    from mia_fast.evaluation.report import compare_reports, format_table, write_report
    from mia_fast.methods import resolve_methods

    if args.compare:
        print(compare_reports(*args.compare))
        return
    if not args.report:
        raise MiaFastError("eval needs --report DIR (or --compare REPORT_A REPORT_B)")
    dataset = load_input(args, require_labels=True)
    labels = metrics.check_labels(dataset.labels)
    out_path = Path(args.out) if args.out else Path(args.report) / "scores.jsonl"
    score_into(args, dataset, out_path)
    score_columns = [c for r in resolve_methods(args.methods.split(","), args.k) for c in r.columns]
    columns = read_scores(out_path, score_columns)
    results = metrics.evaluate(labels, columns, resamples=args.bootstrap, seed=args.seed)
    buckets = None
    if args.buckets:
        names = assign_buckets([count_words(t) for t in dataset.texts], args.buckets)
        buckets = metrics.evaluate_by_group(labels, columns, names, resamples=args.bootstrap, seed=args.seed)
    meta = {"data": input_name(args), "model": model_name(args), "scores": str(out_path), "prepend_start": args.prepend_start,
            "max_words": args.max_words, "methods": args.methods, "k": args.k}
    paths = write_report(args.report, labels, columns, results, meta, buckets=buckets)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
