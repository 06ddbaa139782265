"""``mia-fast rescore``: scores from a stats cache, or a saved TokenStats file, alone, with any methods, k or cap, and
no model."""

from __future__ import annotations

import argparse
from pathlib import Path

from mia_fast.cli.options import (
    add_input_options,
    add_method_settings,
    add_output_options,
    fractions,
    load_input,
    method_list,
    out_help,
)
from mia_fast.cli.paths import check_command_outputs
from mia_fast.cli.run_options import input_name, method_settings, output_config, stderr
from mia_fast.data.gate import Output
from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS, resolve_methods
from mia_fast.scoring.config import ComputeConfig, RunConfig, ScoringConfig

# What the command's --help says of it (argparse wraps it anew).
DESCRIPTION = """Scores DATA from the token statistics a 'mia-fast score --stats-cache DIR' run kept, or from a
TokenStats file (Detector.token_stats(texts).save) of DATA's texts in order: no model is loaded and nothing runs
forward. Methods that read token statistics (loss, zlib, mink, minkpp, lowercase, recall, conrecall) work when their
passes are in the cache (a TokenStats file holds the plain pass only); the others need the model."""


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    add_input_options(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stats-cache", metavar="DIR", help="the cache written by 'mia-fast score --stats-cache DIR'")
    source.add_argument(
        "--stats",
        metavar="FILE.npz",
        help="TokenStats of DATA's texts, in order (Detector.token_stats(texts).save(FILE))",
    )
    parser.add_argument(
        "--setting", help="where the cache holds several model settings: the folder name (or its start) of one"
    )
    parser.add_argument("--out", required=True, help=out_help())
    parser.add_argument(
        "--methods",
        type=method_list,
        default=",".join(DEFAULT_METHODS),
        help="comma-separated methods (or mink_0.2 ...)",
    )
    parser.add_argument(
        "--k", type=fractions, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)"
    )
    add_method_settings(parser.add_argument_group("method settings"))
    add_output_options(parser)
    parser.set_defaults(handler=command_rescore)


def command_rescore(args: argparse.Namespace) -> None:
    from mia_fast.scoring.detector import Detector, check_served  # noqa: PLC0415 (torch, ~2.5 s: --help loads none)
    from mia_fast.scoring.runner import score_file  # noqa: PLC0415 (torch, as above)

    check_command_outputs(args, Output(Path(args.out), staged=True, resumable=True))
    dataset = load_input(args)
    settings = method_settings(args)
    if args.stats:
        if args.setting:
            raise MiaFastError("--setting picks a model setting of a --stats-cache; a --stats file holds one")
        detector = Detector.from_token_stats(args.stats, dataset.texts, settings)
    else:
        detector = Detector.from_stats_cache(args.stats_cache, args.setting, settings)
    scoring = ScoringConfig(tuple(args.methods.split(",")), tuple(args.k))
    check_served(resolve_methods(scoring.methods, scoring.k), detector.settings, detector.engines)
    config = RunConfig(output_config(args, args.out), scoring=scoring, compute=ComputeConfig(progress=not args.quiet))
    score_file(dataset, config, detector, log=stderr, data_name=input_name(args))
