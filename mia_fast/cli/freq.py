"""``mia-fast freq``: build, inspect and merge token-frequency tables (for DC-PDD)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.cli.options import add_overwrite_and_quiet, bounded
from mia_fast.cli.paths import check_command_outputs
from mia_fast.data.artefacts import OutputLock
from mia_fast.data.gate import Output
from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import Counting
from mia_fast.frequency.checkpoints import check_checkpoints, remove_checkpoints
from mia_fast.frequency.corpus import CorpusFormat, expand_sources, require_text
from mia_fast.frequency.counting_tokenizers import TOKENIZER_BACKENDS, one_thread_per_worker
from mia_fast.frequency.table import MODES, FrequencyTable, check_table_tokenizer
from mia_fast.frequency.text_build import build_from_text
from mia_fast.frequency.token_files import TOKEN_DTYPES, build_from_tokens
from mia_fast.methods.settings import Range
from mia_fast.tokens.fingerprint import tokenizer_fingerprint

# The largest vocabularies hold about 256k tokens; a table of 2**24 counts is already 128 MiB.
VOCABULARY_SIZE = Range(1, 2**24, whole=True)
# Threads beyond any machine's cores.
MOST_CORES = 1024


def add_command(name: str, freq: argparse.ArgumentParser) -> None:
    actions = freq.add_subparsers(dest="freq_command", required=True)
    _add_build(actions)
    _add_build_tokens(actions)
    info = actions.add_parser("info", help="print a table's header and its most frequent ids")
    info.set_defaults(handler=command_info)
    info.add_argument("table")
    info.add_argument("--top", type=bounded(VOCABULARY_SIZE), default=10)
    info.add_argument("--tokenizer", help="show the most frequent ids as tokens of this tokenizer")

    merge = actions.add_parser("merge", help="add tables built with the same tokenizer and settings")
    merge.set_defaults(handler=command_merge)
    merge.add_argument("tables", nargs="+")
    merge.add_argument("--out", required=True)
    merge.add_argument("--overwrite", action="store_true")
    merge.add_argument(
        "--allow-overlap",
        action="store_true",
        help="merge tables that share a source (or copies of one table) anyway: their documents are counted again, "
        "and the merged table's sources say how many times",
    )


def _counting_options(parser: argparse.ArgumentParser) -> None:
    """The options of both counting commands: the table written and what is counted."""
    parser.add_argument("--out", required=True, help="the table file to write")
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="occurrence",
        help="count every occurrence (default) or each id once per document",
    )
    parser.add_argument(
        "--max-tokens-per-doc",
        type=bounded(Range(1, 2**30, whole=True)),
        help="count only each document's first N tokens (the DC-PDD code used 1024)",
    )
    add_overwrite_and_quiet(parser, "replace an existing table")


def _add_build(actions: Any) -> None:
    build = actions.add_parser("build", help="tokenize text corpora with a model's tokenizer and count the tokens")
    build.set_defaults(handler=command_build)
    build.add_argument(
        "sources",
        nargs="+",
        help=".txt (a document per line) and .jsonl or .json lines, each plain, .gz (as C4) or .zst/.zstd (as "
        "RedPajama and Dolma), and .parquet (FineWeb), in any case: files, directories or globs (their other files "
        "are named in one line, not read)",
    )
    build.add_argument(
        "--tokenizer",
        required=True,
        help="hub name, local model directory, .gguf file, or 'default' (the built-in model)",
    )
    build.add_argument("--text-field", default="text", help="JSON field or parquet column holding the text")
    build.add_argument(
        "--workers",
        type=bounded(Range(1, MOST_CORES, whole=True)),
        help="cores to count on (default: all); with --ray, threads per Ray task (default 1)",
    )
    build.add_argument(
        "--tokenizer-backend",
        choices=TOKENIZER_BACKENDS,
        default="auto",
        help="who tokenizes: auto (default) counts with fastokens once it tokenizes the corpus's first documents and "
        "a set of hard strings exactly as the model's tokenizer does, else with that tokenizer; fast insists on "
        "fastokens; exact always uses the model's tokenizer",
    )
    build.add_argument(
        "--vocab-size",
        type=bounded(VOCABULARY_SIZE),
        help="the model's vocabulary size when its output head is larger than the tokenizer",
    )
    build.add_argument(
        "--skip-bad-records",
        action="store_true",
        help="skip and count lines that are not valid UTF-8 or JSON or lack the text field (default: stop)",
    )
    build.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="count each file in a Ray task of its own (--workers threads each, default 1) "
        "on a Ray started here or the cluster at ADDRESS (pip install 'mia-fast[ray]')",
    )
    _counting_options(build)


def _add_build_tokens(actions: Any) -> None:
    tokens = actions.add_parser(
        "build-tokens", help="count pre-tokenized files: raw uint16/uint32 streams, .npy, Megatron .bin/.idx"
    )
    tokens.set_defaults(handler=command_build_tokens)
    tokens.add_argument("files", nargs="+", help="token files, or Megatron prefixes (PATH for PATH.bin + PATH.idx)")
    tokens.add_argument("--vocab-size", type=bounded(VOCABULARY_SIZE), required=True)
    tokens.add_argument(
        "--dtype", choices=TOKEN_DTYPES, help="id type of raw files (.npy headers and Megatron indexes carry their own)"
    )
    tokens.add_argument(
        "--doc-separator",
        type=bounded(Range(0, VOCABULARY_SIZE.maximum - 1, whole=True)),
        help="id that ends every document of a raw stream (for --mode document or --max-tokens-per-doc)",
    )
    tokens.add_argument("--tokenizer", help="the tokenizer that made the ids, to stamp its fingerprint on the table")
    tokens.add_argument(
        "--threads",
        type=bounded(Range(0, MOST_CORES, whole=True)),
        default=0,
        help="counting threads (default: one per core)",
    )
    _counting_options(tokens)


def _check_output(args: argparse.Namespace, path: Path, inputs: Sequence[Path] = ()) -> None:
    """Refuses an output the gate refuses (an input, an existing table without --overwrite, a folder) or an
    unwritable place, before any work is done."""
    check_command_outputs(args, Output(path), inputs=inputs)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise MiaFastError(f"{parent}: no such directory for the output")


@contextmanager
def _claimed(args: argparse.Namespace, path: Path, inputs: Sequence[Path] = ()) -> Iterator[None]:
    """The output checked, then locked for the command's length (``OUT.lock``, as ``score`` locks its output: a second
    writer is refused, naming the first one's PID), and checked again under the lock: a writer that finished while
    this one started has written it."""
    _check_output(args, path, inputs)
    with OutputLock(path):
        _check_output(args, path, inputs)
        yield


def _summary(table: FrequencyTable, path: Path) -> str:
    documents = "unknown" if table.documents is None else f"{table.documents:,}"
    seen = int((table.counts > 0).sum())
    return f"wrote {path}: {table.tokens:,} tokens, {documents} documents, {seen:,} of {table.vocab_size:,} ids seen"


def command_build(args: argparse.Namespace) -> None:
    one_thread_per_worker()
    out = Path(args.out)
    sources = expand_sources(args.sources)
    with _claimed(args, out, sources):
        _build(args, out, sources)


def _build(args: argparse.Namespace, out: Path, sources: list[Path]) -> None:
    checkpoints = out.with_name(out.name + ".partial")
    check_checkpoints(checkpoints)
    corpus = CorpusFormat(text_field=args.text_field, skip_bad_records=args.skip_bad_records)
    counting = Counting(
        mode=args.mode,
        max_tokens_per_doc=args.max_tokens_per_doc,
        vocab_size=args.vocab_size,
        tokenizer_backend=args.tokenizer_backend,
    )
    require_text(sources, corpus)  # before torch and the tokenizer, which take long to load
    if args.ray is not None:  # a cluster that does not answer is refused before anything is loaded or removed
        from mia_fast.cluster import build_on_ray, check_address, require_ray  # noqa: PLC0415 (torch: loaded by mia_fast.cluster; build-tokens and info load none)

        require_ray()
        check_address(args.ray or None)
        build, options = build_on_ray, {"address": args.ray or None, "threads": args.workers or 1}
    else:
        build, options = build_from_text, {"workers": args.workers}
    if args.overwrite:
        remove_checkpoints(checkpoints)
    from mia_fast.pipeline.models import load_tokenizer  # noqa: PLC0415 (torch: 1.5 s at start-up; build-tokens and info load none)

    tokenizer = load_tokenizer(args.tokenizer)
    report = build(
        sources,  # the files, not the folders and globs again: what they skip is said once
        tokenizer,
        counting,
        corpus,
        checkpoint_dir=checkpoints,
        progress=not args.quiet,
        **options,
    )
    report.table.save(out, overwrite=args.overwrite)
    remove_checkpoints(checkpoints)
    if report.resumed_shards:
        print(f"resumed: {report.resumed_shards} finished shard(s) taken from {checkpoints}", file=sys.stderr)
    if report.bad_records:
        print(f"skipped {report.bad_records} bad record(s), e.g.:", file=sys.stderr)
        for example in report.bad_examples:
            print(f"  {example}", file=sys.stderr)
    if report.surrogate_documents:
        print(
            f"{report.surrogate_documents} document(s) held lone surrogates (escaped in JSON), counted as U+FFFD "
            "as scoring tokenizes them",
            file=sys.stderr,
        )
    rate = report.table.tokens / max(report.counting_seconds, 1e-9)
    print(
        f"{_summary(report.table, out)} ({report.bytes_read / 2**20:.1f} MiB in {report.seconds:.1f}s, of which "
        f"{report.seconds - report.counting_seconds:.1f}s loading and checking the tokenizers; counting "
        f"{rate / 1e6:.2f}M tokens/s, tokenized by {report.tokenized_by})"
    )


def command_build_tokens(args: argparse.Namespace) -> None:
    out = Path(args.out)
    with _claimed(args, out):
        _build_tokens(args, out)


def _build_tokens(args: argparse.Namespace, out: Path) -> None:
    fingerprint = None
    if args.tokenizer:
        from mia_fast.pipeline.models import load_tokenizer  # noqa: PLC0415 (torch: 1.5 s at start-up; only --tokenizer needs it)

        fingerprint = tokenizer_fingerprint(load_tokenizer(args.tokenizer))
    table = build_from_tokens(
        args.files,
        Counting(mode=args.mode, max_tokens_per_doc=args.max_tokens_per_doc, vocab_size=args.vocab_size),
        dtype=args.dtype,
        doc_separator=args.doc_separator,
        tokenizer_fingerprint=fingerprint,
        threads=args.threads,
        progress=not args.quiet,
    )
    table.save(out, overwrite=args.overwrite)
    print(_summary(table, out))


def command_info(args: argparse.Namespace) -> None:
    table = FrequencyTable.load(args.table)
    decode = _decoder(args.tokenizer, table, args.table)
    for key, value in table.header().items():
        if key == "tokenized_by":
            print(f"{key:22} {', '.join(value) or 'not recorded (pre-tokenized ids, or a table of version 1)'}")
        elif key != "sources":
            print(f"{key:22} {value}")
    print(
        f"{'sources':22} {len(table.sources)}: "
        + ", ".join(source.describe() for source in table.sources[:5])
        + (" ..." if len(table.sources) > 5 else "")
        + _overlaps(table)
    )
    print(f"{'ids seen':22} {int((table.counts > 0).sum())} of {table.vocab_size}")
    total = max(int(table.counts.sum()), 1)
    for rank, token_id in enumerate(_most_frequent(table.counts, args.top), start=1):
        label, count = f" {decode(token_id)!r}" if decode else "", int(table.counts[token_id])
        print(f"{rank:>4}. id {token_id:>7}{label}: {count:,} ({count / total:.3%})")
    seen = int(np.count_nonzero(table.counts))
    if seen < args.top:
        print(f"only {seen} id(s) have a count above 0: fewer than --top {args.top}")


def _decoder(tokenizer_name: str | None, table: FrequencyTable, table_name: str) -> Any:
    """The ids-to-tokens of ``tokenizer_name``, once the table is shown to be counted by it (else refused, naming the
    part that differs); None without one."""
    if not tokenizer_name:
        return None
    from mia_fast.pipeline.models import load_tokenizer  # noqa: PLC0415 (torch: 1.5 s at start-up; only --tokenizer needs it)

    tokenizer = load_tokenizer(tokenizer_name)
    check_table_tokenizer(table, tokenizer, table_name)
    return tokenizer.convert_ids_to_tokens


def _overlaps(table: FrequencyTable) -> str:
    again = sum(source.counted > 1 for source in table.sources)
    return f"; {again} counted more than once (merged with --allow-overlap)" if again else ""


def _most_frequent(counts: np.ndarray, top: int) -> list[int]:
    """The ``top`` ids of the highest counts above 0, the lower id first among equal counts."""
    seen = np.flatnonzero(counts)[::-1]
    return seen[np.argsort(counts[seen], kind="stable")][::-1][:top].tolist()


def command_merge(args: argparse.Namespace) -> None:
    out = Path(args.out)
    with _claimed(args, out, [Path(p) for p in args.tables]):
        tables = [FrequencyTable.load(p) for p in args.tables]
        table = FrequencyTable.merge(tables, [str(p) for p in args.tables], allow_overlap=args.allow_overlap)
        table.save(out, overwrite=args.overwrite)
    print(_summary(table, out))
