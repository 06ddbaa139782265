"""``mia-fast score`` and ``mia-fast eval``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mia_fast.cli.options import (
    WORDS,
    add_blind_permutations_option,
    add_input_options,
    add_model_options,
    add_scoring_options,
    add_server_options,
    bounded,
    bounded_list,
    load_input,
    out_help,
    resamples,
    seed,
    token_count,
)
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import input_name, run_config, score_into, stderr
from mia_fast.cli.runfile import write_report_run_file
from mia_fast.data.artefacts import OutputLock
from mia_fast.data.gate import Output
from mia_fast.errors import MiaFastError
from mia_fast.methods.online import DEFAULT_ONLINE_METHOD
from mia_fast.methods.settings import Range
from mia_fast.scoring.columns import windows_path


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    add_model_options(parser)
    add_server_options(parser)
    add_scoring_options(parser)
    if name == "score":
        parser.add_argument("--out", required=True, help=out_help())
        online = parser.add_argument_group("online detection (Min-K%++ §4.4)")
        online.add_argument(
            "--online",
            type=token_count,
            metavar="W",
            help="also score every window of W scored tokens: each row gets its best "
            "window (online_max, online_start, online_end, online_text) and every window's score goes to "
            "OUT_STEM.windows.jsonl",
        )
        online.add_argument(
            "--online-stride",
            type=token_count,
            metavar="S",
            help="scored tokens between window starts (default W // 2)",
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
        # More model actors than any cluster has GPUs, or shards beyond a billion rows, are typos.
        cluster.add_argument(
            "--ray-workers",
            type=bounded(Range(1, 4096, whole=True)),
            metavar="N",
            help="model actors (default: one per GPU, or one per node without GPUs)",
        )
        cluster.add_argument(
            "--shard-rows",
            type=bounded(Range(1, 10**9, whole=True)),
            metavar="S",
            help="rows per shard, a multiple of --block-rows (default 8 blocks)",
        )
        parser.set_defaults(handler=command_score)
        return
    parser.add_argument("--report", help="directory for metrics.json, figures, report.md and report.html")
    parser.add_argument("--out", help="scores file (default: REPORT/scores.jsonl)")
    parser.add_argument("--bootstrap", type=resamples, default=1000, help="bootstrap resamples for the AUROC CI")
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument(
        "--buckets",
        type=bounded_list(WORDS),
        help="word-length bucket edges, e.g. 32,64,128,256: metrics per bucket too",
    )
    parser.add_argument(
        "--no-blind",
        dest="blind",
        action="store_false",
        help="leave out the model-free baselines (bag of words, dates, n-grams) that check whether the split leaks",
    )
    add_blind_permutations_option(parser)
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("REPORT_A", "REPORT_B"),
        help="print the differences between two report directories and stop",
    )
    parser.set_defaults(handler=command_eval)


def command_score(args: argparse.Namespace) -> None:
    out = Path(args.out)
    online = [Output(windows_path(out), "--out", staged=True, resumable=True)] if args.online is not None else []
    check_command_outputs(args, Output(out, "--out", staged=True, resumable=True), *online)
    if args.ray is not None:
        score_with_ray(args)
        return
    if args.ray_workers is not None or args.shard_rows is not None:
        raise MiaFastError("--ray-workers and --shard-rows need --ray")
    score_into(args, load_input(args, stream=True), Path(args.out))


def score_with_ray(args: argparse.Namespace) -> None:
    """``score --ray``: the data file in shards, scored by model actors on Ray (mia_fast.cluster)."""
    from mia_fast import cluster  # noqa: PLC0415 (ray and torch: only --ray loads them)

    if args.server is not None:
        raise MiaFastError("--ray scores with models loaded on the cluster; a served model needs no --ray")
    cluster.require_ray()
    cluster.check_address(args.ray)
    if args.online is not None:
        raise MiaFastError("--online is not available with --ray; score without --ray")
    if args.suite or args.neighbor_field:
        raise MiaFastError("--ray reads DATA in shards: give a data file, without --suite or --neighbor-field")
    data = load_input(args, stream=True)
    ray = cluster.RayConfig(args.ray or None, args.ray_workers, args.shard_rows)
    cluster.score_on_ray(data, run_config(args, data, Path(args.out)), ray, log=stderr)


def command_eval(args: argparse.Namespace) -> None:
    from mia_fast.evaluation.assessment import BlindSettings  # noqa: PLC0415 (torch, ~2.5 s: score and eval --help load none)
    from mia_fast.evaluation.comparison import compare_reports  # noqa: PLC0415 (torch, ~2.5 s: score and eval --help load none)
    from mia_fast.evaluation.report import format_table  # noqa: PLC0415 (torch, ~2.5 s: score and eval --help load none)
    from mia_fast.evaluation.workflows import EvaluationConfig, evaluate_file  # noqa: PLC0415 (torch, ~2.5 s: score and eval --help load none)

    if args.compare:
        print(compare_reports(*args.compare))
        return
    if not args.report:
        raise MiaFastError("eval needs --report DIR (or --compare REPORT_A REPORT_B)")
    out = Path(args.out) if args.out else Path(args.report) / "scores.jsonl"
    check_command_outputs(
        args,
        Output(Path(args.report), "--report", folder=True, resumable=True),
        Output(out, "--out" if args.out else "--report", staged=True, resumable=True),
    )
    with OutputLock(args.report):  # the report folder is written by one run at a time, as a scores file is
        dataset = load_input(args, require_labels=True)
        blind = BlindSettings(args.blind, args.blind_permutations)
        evaluation = EvaluationConfig(args.report, args.bootstrap, args.seed, args.buckets, blind, args.suite)
        meta = {"data": input_name(args), "max_words": args.max_words}
        done = evaluate_file(dataset, run_config(args, dataset, out), evaluation, meta, log=stderr)
        run_file = write_report_run_file(args.report, args)
    print(format_table(done.results, done.verdicts))
    print("wrote " + ", ".join(str(p) for p in [*done.paths, run_file]), file=sys.stderr)
