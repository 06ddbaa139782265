"""The options the scoring commands share, and turning them into library calls."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mia_fast.data import SUITES
from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import (
    DEFAULT_A,
    DEFAULT_GAMMA,
    DEFAULT_KS,
    DEFAULT_METHODS,
    DEFAULT_PAC_COPIES,
    DEFAULT_SAMIA_SAMPLES,
)
from mia_fast.pipeline.neighbors import DEFAULT_NEIGHBORS, WORD_DROP

DEFAULT_MODEL_NAME = "default (SmolLM2-135M)"


def floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def stderr(message: str) -> None:
    print(message, file=sys.stderr)


def require_positive(args: argparse.Namespace, *names: str) -> None:
    """Refuses a zero or negative value of any of these options (None: not given, left to its default)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise MiaFastError(f"--{name.replace('_', '-')} must be positive, got {value}")


def refuse_nonempty(directory: Path, overwrite: bool, option: str) -> None:
    """An output directory that already holds files is only written into with --overwrite."""
    if directory.is_dir() and any(directory.iterdir()) and not overwrite:
        raise MiaFastError(f"{directory} is not empty; pass --overwrite or choose another {option}")


def add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "data",
        nargs="?",
        help="texts: .jsonl[.gz], .json[.gz], .csv or .parquet; with --suite, that benchmark's local files",
    )
    suites = parser.add_argument_group("benchmarks")
    suites.add_argument(
        "--suite",
        choices=list(SUITES),
        help="a benchmark of the field, from the Hugging Face hub, or from DATA in its layout",
    )
    suites.add_argument("--split", help="the suite's split (e.g. WikiMIA_length64, ngram_13_0.8)")
    suites.add_argument("--config", help="the suite's config (MIMIR domain, ArxivMIA cs or math)")
    suites.add_argument(
        "--max-words", type=int, help="cut every text to its first N words (jieba words for Chinese), as WikiMIA does"
    )
    fields = parser.add_argument_group("input fields")
    fields.add_argument("--text-field", default="text")
    fields.add_argument("--id-field", default="id", help="copied to the output when present")
    fields.add_argument(
        "--label-field", default="label", help="labels (1/0, true/false, member/nonmember), copied to the output"
    )
    fields.add_argument(
        "--group-field", help="document of each text (e.g. the book of a snippet), for per-document rates"
    )
    fields.add_argument(
        "--neighbor-field", help="for neighbor: each row's neighbour texts, a list (as in MIMIR's neighbour splits)"
    )


def add_model_options(parser: argparse.ArgumentParser, reference: bool = True) -> None:
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="hub name or local directory (default: built-in SmolLM2-135M)")
    model.add_argument("--gguf", help="a GGUF model file instead of --model")
    if reference:
        model.add_argument("--ref-model", help="reference model for the 'ref' method (its own tokenizer)")
    model.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    model.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="default: bf16 on GPU, fp32 on CPU")


def add_scoring_options(parser: argparse.ArgumentParser, methods: bool = True) -> None:
    scoring = parser.add_argument_group("scoring")
    if methods:
        scoring.add_argument(
            "--methods",
            default=",".join(DEFAULT_METHODS),
            help="comma-separated: loss,zlib,mink,minkpp,dcpdd,lowercase,ref,recall,conrecall,neighbor,samia,samia_zlib,pac,gradnorm,probe (or mink_0.2 ...)",
        )
        scoring.add_argument(
            "--k", type=floats, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)"
        )
    scoring.add_argument("--a", type=float, default=DEFAULT_A, help="DC-PDD cap (default 0.01)")
    scoring.add_argument(
        "--freq-table",
        "--freq-counts",
        dest="freq_table",
        help="for dcpdd: a frequency table of a reference corpus ('mia-fast freq build'), or per-id counts (.npy)",
    )
    scoring.add_argument(
        "--prefix-nonmembers",
        metavar="FILE",
        help="for recall and conrecall: known non-member texts for the prefix (.txt a text per line, or any DATA format with --text-field)",
    )
    scoring.add_argument(
        "--prefix-members",
        metavar="FILE",
        help="for conrecall: known member texts for its member prefix (same formats)",
    )
    scoring.add_argument(
        "--conrecall-gamma",
        type=float,
        default=DEFAULT_GAMMA,
        help="conrecall's weight of the member prefix (default 0.5)",
    )
    scoring.add_argument(
        "--neighbor-model",
        metavar="MODEL",
        help=f"for neighbor without --neighbor-field: a masked LM (BERT/RoBERTa family, hub name or directory) that makes each text's neighbours, or {WORD_DROP!r} (no model: one word left out)",
    )
    scoring.add_argument(
        "--neighbor-count",
        type=int,
        default=DEFAULT_NEIGHBORS,
        help=f"neighbours made per text (default {DEFAULT_NEIGHBORS})",
    )
    scoring.add_argument(
        "--samia-samples",
        type=int,
        default=DEFAULT_SAMIA_SAMPLES,
        help=f"for samia: continuations sampled per text (default {DEFAULT_SAMIA_SAMPLES})",
    )
    scoring.add_argument(
        "--pac-copies",
        type=int,
        default=DEFAULT_PAC_COPIES,
        help=f"for pac: word-swapped copies per text (default {DEFAULT_PAC_COPIES})",
    )
    scoring.add_argument(
        "--gradnorm-norm",
        type=float,
        choices=[1.0, 2.0, float("inf")],
        default=float("inf"),
        help="for gradnorm: 1, 2 or inf (default inf, as MIMIR)",
    )
    scoring.add_argument(
        "--gradnorm-params",
        metavar="PATTERNS",
        help="for gradnorm: comma-separated fnmatch patterns of parameter names, e.g. 'model.layers.*.mlp.*' (default: all)",
    )
    scoring.add_argument(
        "--method-seed", type=int, default=0, help="seed of samia's sampling and pac's word swaps (default 0)"
    )
    scoring.add_argument(
        "--probe", metavar="PROBE_DIR", help="for probe: a probe trained for this model ('mia-fast probe train')"
    )
    scoring.add_argument(
        "--probe-normalization",
        choices=["split", "train"],
        help="standardise the probe's activations by the scored texts' own statistics (split, the paper) or the training split's (default: as trained)",
    )
    scoring.add_argument(
        "--prepend-start",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prepend the BOS/EOS start token so the first token is scored",
    )
    scoring.add_argument(
        "--batch-tokens", type=int, help="token budget per forward batch (default: 1024 on CPU, 16384 on GPU)"
    )
    scoring.add_argument(
        "--backend",
        choices=["auto", "torch", "triton"],
        default="auto",
        help="token statistics and reductions: Triton kernels (auto on CUDA) or the reference",
    )
    scoring.add_argument("--max-length", type=int, help="window length for long texts (default: the model context)")
    output = parser.add_argument_group("output")
    output.add_argument("--resume", action="store_true", help="continue an interrupted output")
    output.add_argument("--overwrite", action="store_true", help="replace an existing output")
    output.add_argument("--block-rows", type=int, default=512, help="rows scored and written per block")
    output.add_argument(
        "--stats-cache",
        metavar="DIR",
        help="keep every pass's token statistics in DIR (Parquet): a rerun with any methods, k or --a needs no forward pass for texts already there",
    )
    output.add_argument("--quiet", action="store_true", help="no progress bar")


# Settings that change what a score means: a threshold only transfers when they are equal.
SCORE_SETTINGS = (
    "model",
    "prepend_start",
    "max_words",
    "a",
    "freq_table",
    "ref_model",
    "prefix_nonmembers",
    "prefix_members",
    "conrecall_gamma",
    "neighbor_field",
    "neighbor_model",
    "neighbor_count",
    "samia_samples",
    "pac_copies",
    "gradnorm_norm",
    "gradnorm_params",
    "method_seed",
    "probe",
    "probe_normalization",
)


def score_settings(args: argparse.Namespace) -> dict:
    """The options that change what a score means, as a threshold records them."""
    values = {name: getattr(args, name, None) for name in SCORE_SETTINGS}
    values["model"] = model_name(args)
    return values


def single_column(method: str) -> str:
    """The one score column ``method`` names (``mink_0.2``, ``loss``); refuses a method of several columns."""
    from mia_fast.methods import resolve_methods

    columns = [c for r in resolve_methods([method], []) for c in r.columns]
    if len(columns) != 1:
        raise MiaFastError(f"--method takes one score column, e.g. mink_0.2 or loss; {method!r} is not one")
    return columns[0]


def input_name(args: argparse.Namespace) -> str:
    if args.suite:
        return (
            f"{args.suite}:{args.split or SUITES[args.suite].default_split}"
            + (f":{args.config}" if args.config else "")
            + (f" ({args.data})" if args.data else "")
        )
    return str(args.data)


def model_name(args: argparse.Namespace) -> str:
    return args.gguf or args.model or DEFAULT_MODEL_NAME


def load_input(args: argparse.Namespace, require_labels: bool = False, stream: bool = False):
    """DATA, or a benchmark suite (from the hub, or from DATA in its layout), cut to --max-words. With ``stream``
    a DATA file is read block by block as it is scored (a DataStream), unless --neighbor-field needs every
    row's neighbours at hand."""
    from mia_fast.data import DataStream, load_suite, read_dataset
    from mia_fast.data.files import cut_to_words

    if args.suite:
        dataset = load_suite(args.suite, args.split, args.config, files=args.data)
        if args.group_field or args.neighbor_field:
            raise MiaFastError("--group-field and --neighbor-field are for DATA files; a suite brings its own fields")
    elif args.data is None:
        raise MiaFastError("give DATA (a file of texts) or --suite NAME")
    elif args.split or args.config:
        raise MiaFastError("--split and --config select within a --suite")
    elif stream and not args.neighbor_field:
        return DataStream(
            args.data,
            args.text_field,
            args.id_field,
            args.label_field,
            require_labels=require_labels,
            group_field=args.group_field,
            max_words=args.max_words,
        )
    else:
        dataset = read_dataset(
            args.data,
            args.text_field,
            args.id_field,
            args.label_field,
            require_labels=require_labels,
            group_field=args.group_field,
            neighbor_field=args.neighbor_field,
        )
    return cut_to_words(dataset, args.max_words) if args.max_words is not None else dataset


def detector_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Detector's keyword arguments from the model and scoring options."""
    from mia_fast.data import read_texts

    return dict(
        model=args.model,
        gguf=args.gguf,
        ref_model=getattr(args, "ref_model", None),
        frequencies=args.freq_table,
        prefix_nonmembers=read_texts(args.prefix_nonmembers, args.text_field) if args.prefix_nonmembers else None,
        prefix_members=read_texts(args.prefix_members, args.text_field) if args.prefix_members else None,
        conrecall_gamma=args.conrecall_gamma,
        samia_samples=args.samia_samples,
        pac_copies=args.pac_copies,
        gradnorm_norm=args.gradnorm_norm,
        gradnorm_params=args.gradnorm_params.split(",") if args.gradnorm_params else None,
        seed=args.method_seed,
        probe=args.probe,
        probe_normalization=args.probe_normalization,
        device=args.device,
        dtype=args.dtype,
        prepend_start=args.prepend_start,
        batch_tokens=args.batch_tokens,
        max_length=args.max_length,
        backend=args.backend,
        stats_cache=args.stats_cache,
    )


def neighbor_source(args: argparse.Namespace, dataset):
    """The neighbours of --neighbor-field, or the generator of --neighbor-model (None without either)."""
    from mia_fast.pipeline import neighbors

    if args.neighbor_field and args.neighbor_model:
        raise MiaFastError("give --neighbor-field or --neighbor-model, not both")
    if args.neighbor_field:
        return neighbors.Neighbors.of_texts(dataset.texts, dataset.neighbors)
    if args.neighbor_model:
        require_positive(args, "neighbor_count")
        return neighbors.neighbor_source(
            args.neighbor_model, args.neighbor_count, device=args.device, progress=not args.quiet
        )
    return None


def online_setting(args: argparse.Namespace):
    """--online W with its --online-stride and --online-method as an OnlineSetting (checked here); None without --online."""
    from mia_fast.methods.online import DEFAULT_ONLINE_METHOD, OnlineSetting

    if getattr(args, "online", None) is None:
        stray = [
            f"--online-{name}" for name in ("stride", "method") if getattr(args, f"online_{name}", None) is not None
        ]
        if stray:
            raise MiaFastError(f"{' and '.join(stray)} need --online W")
        return None
    return OnlineSetting(args.online, args.online_stride, args.online_method or DEFAULT_ONLINE_METHOD)


def score_into(args: argparse.Namespace, dataset, out) -> None:
    """Scores ``dataset`` into ``out`` with the command's options (resumable, block by block)."""
    from mia_fast.api import score_file

    score_file(
        dataset,
        out,
        methods=args.methods.split(","),
        k=args.k,
        a=args.a,
        resume=args.resume,
        overwrite=args.overwrite,
        block_rows=args.block_rows,
        id_field=args.id_field,
        label_field=args.label_field,
        progress=not args.quiet,
        data_name=input_name(args),
        log=stderr,
        neighbors=neighbor_source(args, dataset),
        online=online_setting(args),
        **detector_options(args),
    )
