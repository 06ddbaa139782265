"""Declaring options: the option groups the commands share (input, model, served model, scoring, method settings,
output) and the argparse types that check every number and method list as it is parsed (one line, before any model
or data is touched); and reading the input those options name (``load_input``). Turning parsed options into a run
is ``run_options.py``'s job."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mia_fast.data import SUITES, DataStream, Fields, load_suite, output_suffixes, read_dataset
from mia_fast.data.files import cut_to_words
from mia_fast.errors import MiaFastError
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS, REGISTRY, resolve_methods
from mia_fast.methods.setting_options import SettingOption, setting_options
from mia_fast.methods.settings import (
    BATCH_TEXTS,
    EPOCHS,
    FRACTION,
    LEARNING_RATE,
    PER_TEXT,
    POSITIVE_INT,
    SEED,
    TOKENS,
    Range,
)
from mia_fast.ops.backend import BACKENDS
from mia_fast.pipeline.choices import DTYPE_NAMES, FORWARDS, batch_tokens_default
from mia_fast.served.client import RequestSettings
from mia_fast.served.url import endpoint, key_variable


def bounded(bounds: Range) -> Callable[[str], int | float]:
    """An argparse type: the number an option spells, refused as it is parsed when outside ``bounds``."""

    def parse(text: str) -> int | float:
        try:
            return bounds.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def bounded_list(bounds: Range) -> Callable[[str], list[int | float]]:
    """An argparse type: comma-separated numbers, at least one, each within ``bounds``."""

    def parse(text: str) -> list[int | float]:
        try:
            values = [bounds.parse(part) for part in text.split(",") if part.strip()]
        except ValueError:
            values = []
        if not values:
            raise argparse.ArgumentTypeError(f"must be comma-separated numbers, each {bounds}, got {text!r}")
        return values

    return parse


fraction = bounded(FRACTION)
fractions = bounded_list(FRACTION)
positive_ints = bounded_list(POSITIVE_INT)
seed = bounded(SEED)
token_count = bounded(TOKENS)
per_text = bounded(PER_TEXT)
learning_rate = bounded(LEARNING_RATE)
epochs = bounded(EPOCHS)
batch_texts = bounded(BATCH_TEXTS)
# Sixteen million tokens in one forward batch: past any accelerator's memory.
batch_tokens = bounded(Range(1, 2**24, whole=True))
# A window scores every token after its first, so it holds at least two.
window_length = bounded(Range(2, TOKENS.maximum, whole=True))
# Resamples of a bootstrap or a permutation test: 100,000 pin an interval or a p-value far finer than any level used.
resamples = bounded(Range(1, 100_000, whole=True))
# Ten million words: longer than any text a model reads whole.
WORDS = Range(1, 10**7, whole=True)
# A wait of more than a day is a typo, not a slow server.
DAY_S = 86_400
# A block's rows, and their scores, are held in memory at once.
block_rows = bounded(Range(1, 10**7, whole=True))


def checked(check: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse type: the text itself, once ``check`` takes it (its one line where it does not)."""

    def parse(text: str) -> str:
        try:
            check(text)
        except MiaFastError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


def method_list(text: str) -> str:
    """An argparse type: comma-separated method names (or ``mink_0.2`` ...), at least one, every one registered."""
    try:
        resolve_methods(text.split(","), ())
    except MiaFastError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_blind_permutations_option(parser: argparse.ArgumentParser) -> None:
    from mia_fast.evaluation import blind_refit  # noqa: PLC0415  (only the commands that offer it import it)

    parser.add_argument(
        "--blind-permutations",
        type=resamples,
        metavar="N",
        help="the most label shuffles the model-free baselines' permutation test refits each baseline on (default: "
        f"{blind_refit.MOST_PERMUTATIONS} up to {blind_refit.FULL_PERMUTATION_ROWS:,} texts, fewer in proportion "
        f"above, at least {blind_refit.FEWEST_PERMUTATIONS}); with fewer than 59 no leak can reach Holm's level over "
        "the three",
    )


def out_help() -> str:
    """--out's help, listing the output formats registered when the parser is built."""
    *others, last = output_suffixes()
    return f"scores: {', '.join(others)} or {last} (one row per input row, in order)"


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
        "--max-words",
        type=bounded(WORDS),
        help="cut every text to its first N words (jieba words for Chinese), as WikiMIA does",
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


def add_model_options(parser: argparse.ArgumentParser, *, reference: bool = True, spread: bool = True) -> None:
    """The model options; ``spread``: with --device-map (a command that fine-tunes the model runs it whole)."""
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="hub name or local directory (default: built-in SmolLM2-135M)")
    model.add_argument("--gguf", help="a GGUF model file instead of --model")
    if reference:
        model.add_argument("--ref-model", help="reference model for ref, ezmia and wbc (with its own tokenizer)")
    add_device_options(model, spread=spread)


def add_device_options(group: argparse._ArgumentGroup, *, spread: bool = True) -> None:
    """Where the models run and in which precision; with ``spread``, --device-map too."""
    group.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    if spread:
        group.add_argument(
            "--device-map",
            metavar="MAP",
            help="instead of --device, for a model larger than one GPU: its layers spread over this machine's GPUs, "
            "then the CPU, then the disk (auto; or balanced, balanced_low_0, sequential), or as a JSON object of "
            'module names to devices (\'{"model.layers.0": "cuda:0", "lm_head": "cpu"}\') or a .json file of one; '
            "the model's own forward runs it",
        )
    group.add_argument("--dtype", choices=DTYPE_NAMES, help="default: bf16 on GPU, fp32 on CPU")


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """A target model reached over HTTP instead of --model: vLLM or any OpenAI-compatible completions server."""
    defaults = RequestSettings()
    server = parser.add_argument_group("served model (vLLM, SGLang, TGI, llama.cpp, OpenAI-compatible servers)")
    server.add_argument(
        "--server", metavar="URL", type=checked(endpoint), help="the server's base URL, e.g. http://127.0.0.1:8000"
    )
    server.add_argument("--server-model", metavar="NAME", help="the model name the server serves")
    server.add_argument(
        "--api-key-env",
        metavar="VAR",
        type=checked(key_variable),
        help="the environment variable that holds the server's API key (the key is never given on the command line)",
    )
    server.add_argument(
        "--tokenizer",
        metavar="NAME",
        help="the served model's tokenizer here (hub name or directory): ids are sent, so both sides score the same "
        "tokens; needed for echo-only servers and minkpp_top* (default: the server's /tokenize)",
    )
    server.add_argument(
        "--in-flight",
        type=bounded(Range(1, 256, whole=True)),
        default=defaults.in_flight,
        help="requests in flight at once (default 4)",
    )
    server.add_argument(
        "--request-tokens",
        type=token_count,
        default=defaults.request_tokens,
        help=f"prompt tokens per request (default {defaults.request_tokens})",
    )
    server.add_argument(
        "--server-timeout",
        type=bounded(Range(0, DAY_S, exclusive_minimum=True)),
        default=defaults.timeout_s,
        metavar="S",
        help=f"seconds an answer may take, in all (default {defaults.timeout_s:g})",
    )
    server.add_argument(
        "--server-retry",
        type=bounded(Range(0, DAY_S)),
        default=defaults.retry_s,
        metavar="S",
        help="seconds to keep retrying a server that refuses connections or answers 429/5xx, e.g. while it "
        f"restarts (default {defaults.retry_s:g})",
    )
    server.add_argument(
        "--insecure-http",
        action="store_true",
        help="allow the key over plain http:// to a host other than this one",
    )


def add_method_settings(
    group: argparse._ArgumentGroup, supplied: Callable[[SettingOption], bool] = lambda option: False
) -> None:
    """Every method setting's flag, as the registry derives them from the methods' settings classes (a value not
    given is None: the setting's default), but those the command ``supplied`` itself."""
    for option in setting_options():
        if supplied(option):
            continue
        flag = option.flag
        group.add_argument(
            f"--{flag.name}",
            *(f"--{alias}" for alias in flag.aliases),
            dest=option.key,
            type=setting_parser(option),
            choices=flag.choices,
            metavar=flag.metavar,
            default=None,
            help=option.help,
        )


def setting_parser(option: SettingOption) -> Callable[[str], Any] | None:
    """How a setting's flag is parsed: its own ``parse``, else its declared Range, else the type of a numeric
    default (None: the text itself)."""
    default = option.default
    if option.flag.parse is not None:
        return option.flag.parse
    if option.spec.bounds is not None:
        return bounded(option.spec.bounds)
    return type(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else None


def add_scoring_options(parser: argparse.ArgumentParser, *, methods: bool = True) -> None:
    scoring = parser.add_argument_group("scoring")
    if methods:
        scoring.add_argument(
            "--methods",
            type=method_list,
            default=",".join(DEFAULT_METHODS),
            help=f"comma-separated: {','.join(REGISTRY)} (or mink_0.2 ...)",
        )
        scoring.add_argument(
            "--k", type=fractions, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)"
        )
    add_method_settings(parser.add_argument_group("method settings"))
    scoring.add_argument(
        "--prepend-start",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="prepend the BOS/EOS start token so the first token is scored",
    )
    scoring.add_argument(
        "--batch-tokens",
        type=batch_tokens,
        help=f"token budget per forward batch (default: {batch_tokens_default()})",
    )
    scoring.add_argument(
        "--backend",
        choices=BACKENDS,
        default=BACKENDS[0],
        help="token statistics and reductions: Triton kernels (auto on CUDA) or the reference",
    )
    scoring.add_argument(
        "--forward",
        choices=FORWARDS,
        default=FORWARDS[0],
        help="the forward: the pad-free packed decoder where the model's family is supported (auto; --verbose says "
        "which a model runs, and why not), always (packed), or the model's own (model)",
    )
    scoring.add_argument(
        "--verbose", action="store_true", help="say which forward path each model runs (packed or not, and why)"
    )
    scoring.add_argument(
        "--max-length", type=window_length, help="window length for long texts (default: the model context)"
    )
    add_output_options(parser, stats_cache=True)


def add_output_options(parser: argparse.ArgumentParser, *, stats_cache: bool = False) -> None:
    # Here, not at the top: scoring.config imports torch, and `freq`, which shares this module's parsers, starts
    # without it.
    from mia_fast.scoring.config import DEFAULT_BLOCK_ROWS  # noqa: PLC0415  (see above)

    output = parser.add_argument_group("output")
    output.add_argument("--resume", action="store_true", help="continue an interrupted output")
    output.add_argument("--overwrite", action="store_true", help="replace an existing output")
    output.add_argument(
        "--block-rows", type=block_rows, default=DEFAULT_BLOCK_ROWS, help="rows scored and written per block"
    )
    if stats_cache:
        output.add_argument(
            "--stats-cache",
            metavar="DIR",
            help="keep every pass's token statistics in DIR (Parquet): a rerun with any methods, k or --a needs no "
            "forward pass for texts already there",
        )
    output.add_argument("--quiet", action="store_true", help="no progress bar")


def add_overwrite_and_quiet(parser: argparse.ArgumentParser, overwrite_help: str) -> None:
    """--overwrite (``overwrite_help``: what it replaces) and --quiet, for a command that writes one output and has
    no output group."""
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def load_input(args: argparse.Namespace, *, require_labels: bool = False, stream: bool = False):
    """DATA, or a benchmark suite (from the hub, or from DATA in its layout), cut to --max-words. With ``stream``
    a DATA file is read block by block as it is scored (a DataStream), unless --neighbor-field needs every
    row's neighbours at hand."""
    if getattr(args, "neighbor_field", None) and getattr(args, "neighbor_model", None):
        raise MiaFastError("give --neighbor-field or --neighbor-model, not both")
    if args.suite:
        dataset = load_suite(args.suite, args.split, args.config, files=args.data)
        if args.group_field or args.neighbor_field:
            raise MiaFastError("--group-field and --neighbor-field are for DATA files; a suite brings its own fields")
    elif args.data is None:
        raise MiaFastError("give DATA (a file of texts) or --suite NAME")
    elif args.split or args.config:
        raise MiaFastError("--split and --config select within a --suite")
    else:
        fields = Fields(args.text_field, args.id_field, args.label_field, args.group_field, args.neighbor_field or None)
        if stream and not fields.neighbors:
            return DataStream(args.data, fields, require_labels=require_labels, max_words=args.max_words)
        dataset = read_dataset(args.data, fields, require_labels=require_labels)
    return cut_to_words(dataset, args.max_words) if args.max_words is not None else dataset
