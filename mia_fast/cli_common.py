"""What the scoring commands share: their options, reading their input, and scoring it into a file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from mia_fast.api import DEFAULT_METHODS, Detector, Scores, check_resources
from mia_fast.data import SUITES, Dataset, ResultWriter, load_suite, read_dataset
from mia_fast.data.text import truncate_words
from mia_fast.errors import MiaFastError
from mia_fast.methods import DEFAULT_A, DEFAULT_KS, MethodRequest, resolve_methods

DEFAULT_BLOCK_ROWS = 512
# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4
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


def add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", nargs="?", help="texts: .jsonl[.gz], .json[.gz], .csv or .parquet; with --suite, that benchmark's local files")
    suites = parser.add_argument_group("benchmarks")
    suites.add_argument("--suite", choices=list(SUITES), help="a benchmark of the field, from the Hugging Face hub, or from DATA in its layout")
    suites.add_argument("--split", help="the suite's split (e.g. WikiMIA_length64, ngram_13_0.8)")
    suites.add_argument("--config", help="the suite's config (MIMIR domain, ArxivMIA cs or math)")
    suites.add_argument("--max-words", type=int, help="cut every text to its first N words (jieba words for Chinese), as WikiMIA does")
    fields = parser.add_argument_group("input fields")
    fields.add_argument("--text-field", default="text")
    fields.add_argument("--id-field", default="id", help="copied to the output when present")
    fields.add_argument("--label-field", default="label", help="labels (1/0, true/false, member/nonmember), copied to the output")
    fields.add_argument("--group-field", help="document of each text (e.g. the book of a snippet), for per-document rates")


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
        scoring.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated: loss,zlib,mink,minkpp,dcpdd,lowercase,ref (or mink_0.2 ...)")
        scoring.add_argument("--k", type=floats, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)")
    scoring.add_argument("--a", type=float, default=DEFAULT_A, help="DC-PDD cap (default 0.01)")
    scoring.add_argument("--freq-table", "--freq-counts", dest="freq_table", help="for dcpdd: a frequency table of a reference corpus ('mia-fast freq build'), or per-id counts (.npy)")
    scoring.add_argument("--prepend-start", action=argparse.BooleanOptionalAction, default=True, help="prepend the BOS/EOS start token so the first token is scored")
    scoring.add_argument("--batch-tokens", type=int, help="token budget per forward batch (default: 1024 on CPU, 16384 on GPU)")
    scoring.add_argument("--backend", choices=["auto", "torch", "triton"], default="auto", help="token statistics: Triton kernels (auto on CUDA) or the torch reference")
    scoring.add_argument("--max-length", type=int, help="window length for long texts (default: the model context)")
    output = parser.add_argument_group("output")
    output.add_argument("--resume", action="store_true", help="continue an interrupted output")
    output.add_argument("--overwrite", action="store_true", help="replace an existing output")
    output.add_argument("--block-rows", type=int, default=DEFAULT_BLOCK_ROWS, help="rows scored and written per block")
    output.add_argument("--quiet", action="store_true", help="no progress bar")


def input_name(args: argparse.Namespace) -> str:
    if args.suite:
        return f"{args.suite}:{args.split or SUITES[args.suite].default_split}" + (f":{args.config}" if args.config else "") + (f" ({args.data})" if args.data else "")
    return str(args.data)


def model_name(args: argparse.Namespace) -> str:
    return args.gguf or args.model or DEFAULT_MODEL_NAME


def load_input(args: argparse.Namespace, require_labels: bool = False) -> Dataset:
    """DATA, or a benchmark suite (from the hub, or from DATA in its layout), cut to --max-words."""
    if args.suite:
        dataset = load_suite(args.suite, args.split, args.config, files=args.data)
        if args.group_field:
            raise MiaFastError("--group-field is for DATA files; a suite brings its own groups (e.g. BookMIA's books)")
    elif args.data is None:
        raise MiaFastError("give DATA (a file of texts) or --suite NAME")
    elif args.split or args.config:
        raise MiaFastError("--split and --config select within a --suite")
    else:
        dataset = read_dataset(args.data, args.text_field, args.id_field, args.label_field, require_labels=require_labels, group_field=args.group_field)
    if args.max_words is not None:
        if args.max_words < 1:
            raise MiaFastError(f"--max-words must be positive, got {args.max_words}")
        dataset.texts = [truncate_words(t, args.max_words) for t in dataset.texts]
    return dataset


def detector_from(args: argparse.Namespace) -> Detector:
    return Detector(
        args.model, gguf=args.gguf, ref_model=args.ref_model, frequencies=args.freq_table, device=args.device,
        dtype=args.dtype, prepend_start=args.prepend_start, batch_tokens=args.batch_tokens,
        max_length=args.max_length, backend=args.backend,
    )


def output_columns(dataset: Dataset, requests: Sequence[MethodRequest], id_field: str, label_field: str) -> list[str]:
    columns = []
    if dataset.ids is not None:
        columns.append(id_field)
    if dataset.labels is not None:
        columns.append(label_field)
    columns.append("n_tokens")
    columns.extend(c for r in requests for c in r.columns)
    columns.append("warning")
    return columns


class _TokenProgress:
    """A tqdm bar over tokens whose total starts as an estimate and is corrected as blocks are tokenized."""

    def __init__(self, estimated_tokens: int, rows: int, disable: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=estimated_tokens, unit="tok", unit_scale=True, dynamic_ncols=True, disable=disable, file=sys.stderr)
        self.rows_total, self.rows_done = rows, 0
        self.block_estimate = 0

    def start_block(self, estimate: int) -> None:
        self.block_estimate = estimate

    def tokenized(self, tokens: int) -> None:
        self.bar.total = max(self.bar.n, self.bar.total - self.block_estimate + tokens)
        self.block_estimate = 0
        self.bar.refresh()

    def advance(self, tokens: int) -> None:
        self.bar.update(tokens)

    def rows(self, count: int) -> None:
        self.rows_done += count
        self.bar.set_postfix_str(f"{self.rows_done}/{self.rows_total} texts")

    def close(self) -> None:
        self.bar.close()


def run_scoring(args: argparse.Namespace, dataset: Dataset, out_path: Path) -> None:
    """Scores ``dataset`` block by block into ``out_path``, resuming where a previous run stopped."""
    requests = resolve_methods(args.methods.split(","), args.k)
    check_resources(requests, has_reference=bool(args.ref_model), has_frequencies=bool(args.freq_table))
    columns = output_columns(dataset, requests, args.id_field, args.label_field)
    writer = ResultWriter(out_path, columns, resume=args.resume, overwrite=args.overwrite)
    if writer.done_rows > len(dataset.texts):
        raise MiaFastError(f"{out_path} holds {writer.done_rows} rows but {input_name(args)} only {len(dataset.texts)}; not the same input")
    if writer.done_rows and dataset.ids is not None:
        written = [str(v) for v in writer.written_column(args.id_field)]
        if written != [str(v) for v in dataset.ids[: writer.done_rows]]:
            raise MiaFastError(f"{out_path} was written for other input rows (ids differ); not resuming")
    if writer.done_rows == len(dataset.texts):
        writer.close()
        print(f"{out_path}: all {writer.done_rows} rows already scored", file=sys.stderr)
        return
    if writer.done_rows:
        print(f"resuming {out_path} after {writer.done_rows} rows", file=sys.stderr)

    detector = detector_from(args)
    requests = detector.requests(args.methods.split(","), args.k)
    passes = 1 + sum(r.method.name in ("lowercase", "ref") for r in requests)
    remaining = range(writer.done_rows, len(dataset.texts))
    estimate = lambda rows: passes * sum(len(dataset.texts[i]) for i in rows) // _CHARS_PER_TOKEN  # noqa: E731
    progress = _TokenProgress(estimate(remaining), len(remaining), disable=args.quiet)
    if args.block_rows < 1:
        raise MiaFastError("--block-rows must be positive")
    try:
        for start in range(writer.done_rows, len(dataset.texts), args.block_rows):
            block = range(start, min(start + args.block_rows, len(dataset.texts)))
            progress.start_block(estimate(block))
            scores = detector.score_requests(
                [dataset.texts[i] for i in block], requests, args.a, progress.tokenized, progress.advance
            )
            writer.write(_rows(dataset, block, scores, args.id_field, args.label_field))
            progress.rows(len(block))
    finally:
        progress.close()
    writer.close()
    unscorable = _count_warnings(out_path, writer)
    if unscorable:
        print(f"warning: {unscorable} texts could not be scored; their scores are NaN, see the 'warning' column", file=sys.stderr)


def _count_warnings(out_path: Path, writer: ResultWriter) -> int:
    return sum(1 for w in writer.written_column("warning") if w not in (None, ""))


def _rows(dataset: Dataset, block: range, scores: Scores, id_field: str, label_field: str) -> list[dict]:
    rows = []
    for j, i in enumerate(block):
        row: dict = {}
        if dataset.ids is not None:
            row[id_field] = dataset.ids[i]
        if dataset.labels is not None:
            row[label_field] = dataset.labels[i]
        row["n_tokens"] = int(scores.n_tokens[j])
        row.update({name: float(values[j]) for name, values in scores.items()})
        row["warning"] = scores.warnings[j]
        rows.append(row)
    return rows


def read_scores(writer_path: Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Score columns of a scores file as float arrays (NaN where a text could not be scored)."""
    from mia_fast.data import read_rows

    records = [record for _, record in read_rows(writer_path)]
    return {c: np.array([np.nan if r[c] in (None, "") else float(r[c]) for r in records]) for c in columns}


