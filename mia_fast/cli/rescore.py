"""``mia-fast rescore``: scores from a stats cache, or a saved TokenStats file, alone, with any methods, k or cap, and no model."""

from __future__ import annotations

import argparse
from pathlib import Path

from mia_fast.cli.options import add_input_options, floats
from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import DEFAULT_A, DEFAULT_GAMMA, DEFAULT_KS, DEFAULT_METHODS


def add_command(name: str, parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Scores DATA from the token statistics a 'mia-fast score --stats-cache DIR' run kept, or from a TokenStats "
        "file (Detector.token_stats(texts).save) of DATA's texts in order: no model is loaded and nothing runs "
        "forward. Methods that read token statistics (loss, zlib, mink, minkpp, lowercase, recall, conrecall) work "
        "when their passes are in the cache (a TokenStats file holds the plain pass only); the others need the model."
    )
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
    parser.add_argument(
        "--out", required=True, help="scores: .jsonl, .csv or .parquet (one row per input row, in order)"
    )
    parser.add_argument(
        "--methods", default=",".join(DEFAULT_METHODS), help="comma-separated methods (or mink_0.2 ...)"
    )
    parser.add_argument(
        "--k", type=floats, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)"
    )
    parser.add_argument("--a", type=float, default=DEFAULT_A, help="DC-PDD cap (default 0.01)")
    parser.add_argument(
        "--prefix-nonmembers",
        metavar="FILE",
        help="for recall and conrecall: the known non-member texts they were scored with",
    )
    parser.add_argument(
        "--prefix-members", metavar="FILE", help="for conrecall: the known member texts it was scored with"
    )
    parser.add_argument(
        "--conrecall-gamma",
        type=float,
        default=DEFAULT_GAMMA,
        help="conrecall's weight of the member prefix (default 0.5)",
    )
    parser.add_argument("--resume", action="store_true", help="continue an interrupted output")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    parser.add_argument("--block-rows", type=int, default=512, help="rows scored and written per block")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=command_rescore)


def command_rescore(args: argparse.Namespace) -> None:
    from mia_fast.api import Detector, score_file
    from mia_fast.cli.options import input_name, load_input, stderr
    from mia_fast.data import read_texts

    dataset = load_input(args)
    prefixes = {
        name: read_texts(getattr(args, name), args.text_field) if getattr(args, name) else None
        for name in ("prefix_nonmembers", "prefix_members")
    }
    settings = dict(conrecall_gamma=args.conrecall_gamma, **prefixes)
    if args.stats:
        if args.setting:
            raise MiaFastError("--setting picks a model setting of a --stats-cache; a --stats file holds one")
        detector = Detector.from_token_stats(args.stats, dataset.texts, **settings)
    else:
        detector = Detector.from_stats_cache(args.stats_cache, args.setting, **settings)
    score_file(
        dataset,
        Path(args.out),
        methods=args.methods.split(","),
        k=args.k,
        a=args.a,
        detector=detector,
        resume=args.resume,
        overwrite=args.overwrite,
        block_rows=args.block_rows,
        id_field=args.id_field,
        label_field=args.label_field,
        progress=not args.quiet,
        data_name=input_name(args),
        log=stderr,
    )
