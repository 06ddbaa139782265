"""The ``mia-fast`` command line: ``score`` texts, ``eval`` methods against labels, ``freq`` tables."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from mia_fast.api import DEFAULT_METHODS, Detector, Scores, check_resources
from mia_fast.cli_freq import add_freq_commands, command_freq
from mia_fast.data import Dataset, ResultWriter, read_dataset
from mia_fast.errors import MiaFastError
from mia_fast.methods import DEFAULT_A, DEFAULT_KS, MethodRequest, resolve_methods

DEFAULT_BLOCK_ROWS = 512
# Rough characters per token, only to size the progress bar before a block is tokenized.
_CHARS_PER_TOKEN = 4


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="texts: .jsonl[.gz], .json[.gz], .csv or .parquet")
    model = parser.add_argument_group("model")
    model.add_argument("--model", help="hub name or local directory (default: built-in SmolLM2-135M)")
    model.add_argument("--gguf", help="a GGUF model file instead of --model")
    model.add_argument("--ref-model", help="reference model for the 'ref' method (its own tokenizer)")
    model.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    model.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help="default: bf16 on GPU, fp32 on CPU")
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated: loss,zlib,mink,minkpp,dcpdd,lowercase,ref (or mink_0.2 ...)")
    scoring.add_argument("--k", type=_floats, default=list(DEFAULT_KS), help="fractions for mink/minkpp (default 0.1,...,1.0)")
    scoring.add_argument("--a", type=float, default=DEFAULT_A, help="DC-PDD cap (default 0.01)")
    scoring.add_argument("--freq-table", "--freq-counts", dest="freq_table", help="for dcpdd: a frequency table of a reference corpus ('mia-fast freq build'), or per-id counts (.npy)")
    scoring.add_argument("--prepend-start", action=argparse.BooleanOptionalAction, default=True, help="prepend the BOS/EOS start token so the first token is scored")
    scoring.add_argument("--batch-tokens", type=int, help="token budget per forward batch (default: 1024 on CPU, 16384 on GPU)")
    scoring.add_argument("--backend", choices=["auto", "torch", "triton"], default="auto", help="token statistics: Triton kernels (auto on CUDA) or the torch reference")
    scoring.add_argument("--max-length", type=int, help="window length for long texts (default: the model context)")
    fields = parser.add_argument_group("input fields")
    fields.add_argument("--text-field", default="text")
    fields.add_argument("--id-field", default="id", help="copied to the output when present")
    fields.add_argument("--label-field", default="label", help="0/1 labels (1 = member), copied to the output")
    output = parser.add_argument_group("output")
    output.add_argument("--resume", action="store_true", help="continue an interrupted output")
    output.add_argument("--overwrite", action="store_true", help="replace an existing output")
    output.add_argument("--block-rows", type=int, default=DEFAULT_BLOCK_ROWS, help="rows scored and written per block")
    output.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="mia-fast", description="Fast pretraining-data detection.")
    parser.add_argument("--version", action="version", version=f"mia-fast {version('mia-fast')}")
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser("score", help="score texts with every requested method")
    _add_common(score)
    score.add_argument("--out", required=True, help="scores: .jsonl, .csv or .parquet (one row per input row, in order)")
    evaluate = commands.add_parser("eval", help="score labelled texts and report AUROC / TPR@FPR per method")
    _add_common(evaluate)
    evaluate.add_argument("--report", required=True, help="directory for metrics.json and roc.png")
    evaluate.add_argument("--out", help="scores file (default: REPORT/scores.jsonl)")
    evaluate.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUROC CI")
    evaluate.add_argument("--seed", type=int, default=0)
    add_freq_commands(commands)
    return parser


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
        raise MiaFastError(f"{out_path} holds {writer.done_rows} rows but {args.data} only {len(dataset.texts)}; not the same input")
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

    detector = Detector(
        args.model,
        gguf=args.gguf,
        ref_model=args.ref_model,
        frequencies=args.freq_table,
        device=args.device,
        dtype=args.dtype,
        prepend_start=args.prepend_start,
        batch_tokens=args.batch_tokens,
        max_length=args.max_length,
        backend=args.backend,
    )
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


def _read_scores(writer_path: Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    from mia_fast.data import read_rows

    records = [record for _, record in read_rows(writer_path)]
    return {c: np.array([np.nan if r[c] in (None, "") else float(r[c]) for r in records]) for c in columns}


def command_score(args: argparse.Namespace) -> None:
    dataset = read_dataset(args.data, args.text_field, args.id_field, args.label_field)
    run_scoring(args, dataset, Path(args.out))


def command_eval(args: argparse.Namespace) -> None:
    from mia_fast import metrics
    from mia_fast.report import format_table, write_report

    dataset = read_dataset(args.data, args.text_field, args.id_field, args.label_field, require_labels=True)
    labels = metrics.check_labels(dataset.labels)
    out_path = Path(args.out) if args.out else Path(args.report) / "scores.jsonl"
    run_scoring(args, dataset, out_path)
    score_columns = [c for r in resolve_methods(args.methods.split(","), args.k) for c in r.columns]
    columns = _read_scores(out_path, score_columns)
    results = metrics.evaluate(labels, columns, resamples=args.bootstrap, seed=args.seed)
    meta = {"data": str(args.data), "model": args.gguf or args.model or "default (SmolLM2-135M)", "scores": str(out_path), "prepend_start": args.prepend_start}
    paths = write_report(args.report, labels, columns, results, meta)
    print(format_table(results))
    print("wrote " + ", ".join(str(p) for p in paths), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        {"score": command_score, "eval": command_eval, "freq": command_freq}[args.command](args)
    except MiaFastError as exc:
        print(f"mia-fast: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mia-fast: interrupted; finished rows are kept, continue with --resume", file=sys.stderr)
        return 130
    print(f"done in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
