"""The ``mia-fast`` command line: ``score``, ``eval``, ``calibrate``, ``classify``, ``demo`` and ``freq``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from mia_fast.cli_audit import add_audit_commands
from mia_fast.cli_common import (
    add_input_options,
    add_model_options,
    add_scoring_options,
    input_name,
    ints,
    load_input,
    model_name,
    read_scores,
    run_scoring,
)
from mia_fast.cli_demo import add_demo_command
from mia_fast.cli_freq import add_freq_commands
from mia_fast.errors import MiaFastError
from mia_fast.methods import resolve_methods


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="mia-fast", description="Fast pretraining-data detection.")
    parser.add_argument("--version", action="version", version=f"mia-fast {version('mia-fast')}")
    commands = parser.add_subparsers(dest="command", required=True)

    score = commands.add_parser("score", help="score texts with every requested method")
    add_input_options(score)
    add_model_options(score)
    add_scoring_options(score)
    score.add_argument("--out", required=True, help="scores: .jsonl, .csv or .parquet (one row per input row, in order)")
    score.set_defaults(handler=command_score)

    evaluate = commands.add_parser("eval", help="score labelled texts and report AUROC / TPR@FPR per method")
    add_input_options(evaluate)
    add_model_options(evaluate)
    add_scoring_options(evaluate)
    evaluate.add_argument("--report", help="directory for metrics.json, figures, report.md and report.html")
    evaluate.add_argument("--out", help="scores file (default: REPORT/scores.jsonl)")
    evaluate.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUROC CI")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--buckets", type=ints, help="word-length bucket edges, e.g. 32,64,128,256: metrics per bucket too")
    evaluate.add_argument("--compare", nargs=2, metavar=("REPORT_A", "REPORT_B"), help="print the differences between two report directories and stop")
    evaluate.set_defaults(handler=command_eval)

    add_audit_commands(commands)
    add_demo_command(commands)
    add_freq_commands(commands)
    return parser


def command_score(args: argparse.Namespace) -> None:
    run_scoring(args, load_input(args), Path(args.out))


def command_eval(args: argparse.Namespace) -> None:
    from mia_fast import metrics
    from mia_fast.data.text import assign_buckets, count_words
    from mia_fast.report import compare_reports, format_table, write_report

    if args.compare:
        print(compare_reports(*args.compare))
        return
    if not args.report:
        raise MiaFastError("eval needs --report DIR (or --compare REPORT_A REPORT_B)")
    dataset = load_input(args, require_labels=True)
    labels = metrics.check_labels(dataset.labels)
    out_path = Path(args.out) if args.out else Path(args.report) / "scores.jsonl"
    run_scoring(args, dataset, out_path)
    score_columns = [c for r in resolve_methods(args.methods.split(","), args.k) for c in r.columns]
    columns = read_scores(out_path, score_columns)
    results = metrics.evaluate(labels, columns, resamples=args.bootstrap, seed=args.seed)
    buckets = None
    if args.buckets:
        buckets = {}
        names = np.array(assign_buckets([count_words(t) for t in dataset.texts], args.buckets))
        for name in dict.fromkeys(names):
            inside = names == name
            if len(set(labels[inside].tolist())) == 2:
                buckets[name] = metrics.evaluate(labels[inside], {c: v[inside] for c, v in columns.items()}, resamples=args.bootstrap, seed=args.seed)
    meta = {"data": input_name(args), "model": model_name(args), "scores": str(out_path), "prepend_start": args.prepend_start,
            "max_words": args.max_words, "methods": args.methods, "k": args.k}
    paths = write_report(args.report, labels, columns, results, meta, buckets=buckets)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        args.handler(args)
    except MiaFastError as exc:
        print(f"mia-fast: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mia-fast: interrupted; finished work is kept (scores: continue with --resume)", file=sys.stderr)
        return 130
    print(f"done in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
