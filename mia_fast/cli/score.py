"""``mia-fast score`` and ``mia-fast eval``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mia_fast.cli.options import (
    add_input_options,
    add_model_options,
    add_scoring_options,
    detector_options,
    input_name,
    ints,
    load_input,
    model_name,
    neighbor_source,
    score_into,
    stderr,
)
from mia_fast.errors import MiaFastError
from mia_fast.methods.online import DEFAULT_ONLINE_METHOD


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    add_model_options(parser)
    add_scoring_options(parser)
    if name == "score":
        parser.add_argument(
            "--out", required=True, help="scores: .jsonl, .csv or .parquet (one row per input row, in order)"
        )
        online = parser.add_argument_group("online detection (Min-K%++ §4.4)")
        online.add_argument(
            "--online",
            type=int,
            metavar="W",
            help="also score every window of W scored tokens: each row gets its best "
            "window (online_max, online_start, online_end, online_text) and every window's score goes to OUT_STEM.windows.jsonl",
        )
        online.add_argument(
            "--online-stride", type=int, metavar="S", help="scored tokens between window starts (default W // 2)"
        )
        online.add_argument("--online-method", help=f"loss, mink_<k> or minkpp_<k> (default {DEFAULT_ONLINE_METHOD})")
        cluster = parser.add_argument_group("Ray cluster (pip install 'mia-fast[ray]')")
        cluster.add_argument(
            "--ray",
            nargs="?",
            const="",
            metavar="ADDRESS",
            help="score on Ray: a Ray started here, or the cluster at ADDRESS "
            "(host:port, ray://host:10001 or auto); shards and their manifest go to OUT.shards/",
        )
        cluster.add_argument(
            "--ray-workers",
            type=int,
            metavar="N",
            help="model actors (default: one per GPU, or one per node without GPUs)",
        )
        cluster.add_argument(
            "--shard-rows", type=int, metavar="S", help="rows per shard, a multiple of --block-rows (default 8 blocks)"
        )
        parser.set_defaults(handler=command_score)
        return
    parser.add_argument("--report", help="directory for metrics.json, figures, report.md and report.html")
    parser.add_argument("--out", help="scores file (default: REPORT/scores.jsonl)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUROC CI")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--buckets", type=ints, help="word-length bucket edges, e.g. 32,64,128,256: metrics per bucket too"
    )
    parser.add_argument(
        "--no-blind",
        dest="blind",
        action="store_false",
        help="leave out the model-free baselines (bag of words, dates) that check whether the split leaks",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("REPORT_A", "REPORT_B"),
        help="print the differences between two report directories and stop",
    )
    parser.set_defaults(handler=command_eval)


def command_score(args: argparse.Namespace) -> None:
    if args.ray is not None:
        score_with_ray(args)
        return
    if args.ray_workers is not None or args.shard_rows is not None:
        raise MiaFastError("--ray-workers and --shard-rows need --ray")
    score_into(args, load_input(args, stream=True), Path(args.out))


def score_with_ray(args: argparse.Namespace) -> None:
    """``score --ray``: the data file in shards, scored by model actors on Ray (mia_fast.cluster)."""
    from mia_fast import cluster

    cluster.require_ray()
    cluster.check_address(args.ray)
    if args.online is not None:
        raise MiaFastError("--online is not available with --ray; score without --ray")
    if args.suite or args.neighbor_field:
        raise MiaFastError("--ray reads DATA in shards: give a data file, without --suite or --neighbor-field")
    data = load_input(args, stream=True)
    cluster.score_on_ray(
        data,
        Path(args.out),
        address=args.ray or None,
        workers=args.ray_workers,
        shard_rows=args.shard_rows,
        methods=args.methods.split(","),
        k=args.k,
        a=args.a,
        resume=args.resume,
        overwrite=args.overwrite,
        block_rows=args.block_rows,
        id_field=args.id_field,
        label_field=args.label_field,
        progress=not args.quiet,
        log=stderr,
        neighbors=neighbor_source(args, data),
        **detector_options(args),
    )


def command_eval(args: argparse.Namespace) -> None:
    from mia_fast.data import read_scores
    from mia_fast.data.text import assign_buckets, count_words
    from mia_fast.evaluation import metrics
    from mia_fast.evaluation.blind import blind_scores, cross_validation_folds
    from mia_fast.evaluation.report import compare_reports, format_table, write_report
    from mia_fast.methods import resolve_methods

    if args.compare:
        print(compare_reports(*args.compare))
        return
    if not args.report:
        raise MiaFastError("eval needs --report DIR (or --compare REPORT_A REPORT_B)")
    dataset = load_input(args, require_labels=True)
    labels = metrics.check_labels(dataset.labels)
    if args.blind:
        cross_validation_folds(labels)  # before any scoring
    out_path = Path(args.out) if args.out else Path(args.report) / "scores.jsonl"
    score_into(args, dataset, out_path)
    score_columns = [c for r in resolve_methods(args.methods.split(","), args.k) for c in r.columns]
    columns = read_scores(out_path, score_columns)
    if args.blind:
        columns |= blind_scores(dataset.texts, labels, seed=args.seed)
    results = metrics.evaluate(labels, columns, resamples=args.bootstrap, seed=args.seed)
    buckets = None
    if args.buckets:
        names = assign_buckets([count_words(t) for t in dataset.texts], args.buckets)
        buckets = metrics.evaluate_by_group(labels, columns, names, resamples=args.bootstrap, seed=args.seed)
    meta = {
        "data": input_name(args),
        "model": model_name(args),
        "scores": str(out_path),
        "prepend_start": args.prepend_start,
        "max_words": args.max_words,
        "methods": args.methods,
        "k": args.k,
        "model_free_baselines": args.blind,
    }
    paths = write_report(args.report, labels, columns, results, meta, buckets=buckets)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)
