"""Frequency tables of text corpora: each file's documents tokenized with the model's HF fast tokenizer in batches
on worker threads (the Rust tokenizer releases the GIL), and every batch counted by the native core as soon as it is
tokenized, so counting overlaps tokenization. Files are shards: counted one by one, kept as checkpoints, and their
tables added in file order."""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.frequency.build import (
    BatchCounter,
    Counting,
    check_counting_options,
    counting_tokenizer,
    tokenizer_vocab_size,
)
from mia_fast.frequency.checkpoints import ShardCheckpoints
from mia_fast.frequency.corpus import BadRecords, CorpusFormat, expand_sources, iter_documents, no_tokens, require_text
from mia_fast.frequency.progress import Progress
from mia_fast.frequency.table import FrequencyTable, tokenizer_fingerprint

# Characters of text per tokenizer batch: large enough to amortise the call, small enough to stream.
BATCH_CHARS = 1 << 20


def _batches(documents: Iterable[tuple[str, int]]) -> Iterator[tuple[list[str], int]]:
    """Groups documents into batches of about BATCH_CHARS characters, with the file position after each."""
    texts: list[str] = []
    chars = position = 0
    for text, position in documents:
        texts.append(text)
        chars += len(text)
        if chars >= BATCH_CHARS:
            yield texts, position
            texts, chars = [], 0
    if texts:
        yield texts, position


@dataclass
class BuildReport:
    """What a text build made: the table, the bad records skipped (their count and the first few), the shards
    resumed from checkpoints, the seconds it took and the bytes of corpus it read."""

    table: FrequencyTable
    bad_records: int
    bad_examples: list[str]
    resumed_shards: int
    seconds: float
    bytes_read: int


def build_from_text(
    sources: Sequence[str | os.PathLike],
    tokenizer: Any,
    counting: Counting = Counting(),  # noqa: B008  (frozen dataclasses)
    corpus: CorpusFormat = CorpusFormat(),  # noqa: B008
    *,
    workers: int | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> BuildReport:
    """Counts the tokens of text corpora as ``tokenizer`` (a transformers fast tokenizer or a
    ``tokenizers.Tokenizer``) tokenizes them, without special tokens, as ``counting`` says, reading them as
    ``corpus`` says.

    ``counting.vocab_size`` defaults to the tokenizer's; give the model's when its output head is larger.
    With ``checkpoint_dir`` every finished shard (input file) is kept there, and a rerun skips it; a build that
    stops before any shard counted a token removes the directory, which would hold nothing to resume.
    """
    settings = text_build_settings(tokenizer, counting, corpus)
    files = expand_sources(sources)
    require_text(files, corpus)
    workers = workers or os.cpu_count() or 1
    fingerprint = settings["tokenizer_fingerprint"]
    text_field = corpus.text_field
    checkpoints = ShardCheckpoints(Path(checkpoint_dir), settings, files) if checkpoint_dir else None
    counter = BatchCounter(
        counting_tokenizer(tokenizer), settings["vocab_size"], counting.mode, counting.max_tokens_per_doc
    )
    bad = BadRecords(skip=corpus.skip_bad_records)
    started = time.perf_counter()
    total_bytes = sum(p.stat().st_size for p in files)
    bar = Progress(total_bytes, progress)
    tables, resumed = [], 0
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mia-fast-tokenize") as pool:
            for index, path in enumerate(files):
                finished = checkpoints.load(index) if checkpoints else None
                if finished is not None:
                    table, skipped = finished
                    bad.count += skipped
                    resumed += 1
                    bar.advance(path.stat().st_size, table.tokens, table.documents or 0)
                else:
                    skipped_before = bad.count
                    table = _count_text_shard(path, text_field, bad, pool, counter, workers, fingerprint, bar)
                    if checkpoints:
                        checkpoints.save(index, table, bad.count - skipped_before)
                tables.append(table)
        table = FrequencyTable.merge(tables)
        if table.tokens == 0:
            raise no_tokens(files)
    except BaseException:
        if checkpoints and not any(table.tokens for table in tables):
            checkpoints.remove()
        raise
    finally:
        bar.close()
    return BuildReport(table, bad.count, bad.examples, resumed, time.perf_counter() - started, total_bytes)


def text_build_settings(
    tokenizer: Any,
    counting: Counting = Counting(),  # noqa: B008  (frozen dataclasses)
    corpus: CorpusFormat = CorpusFormat(),  # noqa: B008
) -> dict[str, Any]:
    """Everything a text build's table depends on besides its sources (checked here): what a resumed build
    must share with the one it continues, and what every shard of a distributed build is counted with."""
    check_counting_options(counting.mode, counting.max_tokens_per_doc)
    own_vocab = tokenizer_vocab_size(tokenizer)
    vocab_size = counting.vocab_size or own_vocab
    if vocab_size < own_vocab:
        raise MiaFastError(f"vocab_size {vocab_size} is smaller than the tokenizer's {own_vocab} ids")
    return {
        "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
        "vocab_size": vocab_size,
        "mode": counting.mode,
        "max_tokens_per_doc": counting.max_tokens_per_doc,
        "text_field": corpus.text_field,
    }


def count_text_file(
    path: Path, tokenizer: Any, settings: dict[str, Any], *, workers: int = 1, skip_bad_records: bool = False
) -> tuple[FrequencyTable, BadRecords]:
    """One corpus file counted on its own with ``settings`` (:func:`text_build_settings`), and its bad records: one
    shard of a build, whose table is ``FrequencyTable.merge`` of its files' tables in order."""
    counter = BatchCounter(
        counting_tokenizer(tokenizer), settings["vocab_size"], settings["mode"], settings["max_tokens_per_doc"]
    )
    bad = BadRecords(skip=skip_bad_records)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mia-fast-tokenize") as pool:
        table = _count_text_shard(
            path,
            settings["text_field"],
            bad,
            pool,
            counter,
            workers,
            settings["tokenizer_fingerprint"],
            Progress(0, False),
        )
    return table, bad


def _count_text_shard(
    path: Path,
    text_field: str,
    bad: BadRecords,
    pool: ThreadPoolExecutor,
    counter: BatchCounter,
    workers: int,
    fingerprint: str,
    bar: Progress,
) -> FrequencyTable:
    counts = np.zeros(counter.vocab_size, dtype=np.uint64)
    tokens = documents = 0
    pending: deque = deque()

    def collect() -> None:
        nonlocal counts, tokens
        batch_counts, batch_tokens = pending.popleft().result()
        counts += batch_counts
        tokens += batch_tokens
        bar.advance(0, batch_tokens)

    # The reading thread keeps a few batches in flight per worker, so tokenizing never waits on it.
    position = 0
    for texts, new_position in _batches(iter_documents(path, text_field, bad)):
        pending.append(pool.submit(counter, texts))
        documents += len(texts)
        while len(pending) > 2 * workers:
            collect()
        bar.advance(new_position - position, 0, len(texts))
        position = new_position
    while pending:
        collect()
    bar.advance(path.stat().st_size - position)
    return FrequencyTable(
        counts, tokens, documents, counter.mode, counter.max_tokens_per_doc, fingerprint, (str(path),)
    )
