"""Frequency tables of text corpora: every file cut into pieces (:mod:`mia_fast.frequency.pieces`), each piece read,
parsed, tokenized and counted by a worker on its own, the pieces' counts added in file order, so the table is the same
on any number of workers. Files are shards: each finished one is kept as a checkpoint, and a rerun resumes.

Workers are threads of this process where the counting tokenizer lets other threads run while it encodes (reading and
parsing, which hold the GIL, then take a small share) and there are few of them; else processes, each with its own
copy of the tokenizer the check accepted (:mod:`mia_fast.frequency.counting_tokenizers`)."""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.frequency.build import BatchCounter, Counting, check_counting_options, tokenizer_vocab_size
from mia_fast.frequency.checkpoints import ShardCheckpoints
from mia_fast.frequency.corpus import BadRecords, CorpusFormat, expand_sources, iter_documents, no_tokens, require_text
from mia_fast.frequency.counting_tokenizers import (
    CounterChoice,
    CounterRecipe,
    choose_counter,
    loaded,
    preload_fast,
    start_worker,
)
from mia_fast.frequency.pieces import Piece, piece_documents, plan_pieces
from mia_fast.frequency.progress import Progress
from mia_fast.frequency.sources import TableSource
from mia_fast.frequency.table import FrequencyTable
from mia_fast.frequency.worker_processes import process_pool
from mia_fast.tokens.fingerprint import tokenizer_fingerprint
from mia_fast.tokens.tokenize import check_deterministic

# Characters of text per tokenizer call: large enough that a thread seldom waits for the GIL, small enough to stream.
BATCH_CHARS = 1 << 21
# The most workers a build runs as threads of its own process: reading and parsing hold the GIL for 13-25% of a
# document's time on one core (benchmarks/freq.py), so a few threads share it; more run as processes, which start in
# about a second each (measured slower than threads on 2 cores for a 200 MB corpus).
MOST_THREAD_WORKERS = 4
# The corpus's first documents that the fast tokenizer must tokenize as the model's own does before it counts.
CHECK_DOCUMENTS = 64
CHECK_CHARACTERS = 1 << 18


def document_batches(blocks: Iterable[list[str]]) -> Iterator[list[str]]:
    """Blocks of documents joined into batches of at least BATCH_CHARS characters (the last one may hold fewer)."""
    texts: list[str] = []
    chars = 0
    for block in blocks:
        texts += block
        chars += sum(map(len, block))
        if chars >= BATCH_CHARS:
            yield texts
            texts, chars = [], 0
    if texts:
        yield texts


@dataclass(frozen=True)
class PieceJob:
    """What every piece of a build is counted with: the key of the counting tokenizer each worker's process holds,
    and the build's settings (:func:`text_build_settings`)."""

    counter: str
    vocab_size: int
    mode: str
    max_tokens_per_doc: int | None
    text_field: str
    skip_bad_records: bool


@dataclass
class PieceCount:
    """The counts of a piece (or of a shard, added up piece by piece), its tokens, documents and bad records."""

    counts: np.ndarray
    tokens: int = 0
    documents: int = 0
    bad: BadRecords = field(default_factory=BadRecords)

    def add(self, other: PieceCount) -> None:
        self.counts += other.counts
        self.tokens += other.tokens
        self.documents += other.documents
        self.bad.add(other.bad)


def count_piece(piece: Piece, job: PieceJob) -> PieceCount:
    """Reads, tokenizes and counts one piece of a corpus file, in the worker that runs it."""
    counter = BatchCounter(loaded(job.counter), job.vocab_size, job.mode, job.max_tokens_per_doc)
    total = PieceCount(np.zeros(job.vocab_size, dtype=np.uint64), bad=BadRecords(skip=job.skip_bad_records))
    try:
        for texts in document_batches(piece_documents(piece, job.text_field, total.bad)):
            counts, tokens = counter(texts)
            total.counts += counts
            total.tokens += tokens
            total.documents += len(texts)
    except MiaFastError as exc:  # a plain MiaFastError crosses a process boundary whatever its subclass holds
        raise MiaFastError(str(exc)) from None
    return total


@contextmanager
def worker_pool(workers: int, choice: CounterChoice) -> Iterator[Executor]:
    """``workers`` threads of this process, or processes that each build the chosen counting tokenizer once."""
    if workers == 1 or (workers <= MOST_THREAD_WORKERS and choice.counter.releases_gil):
        pool: Executor = ThreadPoolExecutor(workers, thread_name_prefix="mia-fast-count")
    else:
        pool = process_pool(workers, start_worker, (choice.recipe,))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def counted_pieces(pieces: Sequence[Piece], job: PieceJob, pool: Executor, window: int) -> Iterator[tuple[Piece, Any]]:
    """Each piece with its :class:`PieceCount`, in order, at most ``window`` of them in flight."""
    pending: deque = deque()

    def next_done() -> tuple[Piece, PieceCount]:
        piece, future = pending.popleft()
        try:
            return piece, future.result()
        except BrokenProcessPool:
            raise MiaFastError(
                "a counting worker process died (out of memory?); rerun the same command to continue"
            ) from None

    for piece in pieces:
        pending.append((piece, pool.submit(count_piece, piece, job)))
        if len(pending) > window:
            yield next_done()
    while pending:
        yield next_done()


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def corpus_sample(files: Sequence[Path], corpus: CorpusFormat) -> list[str]:
    """The corpus's first documents (up to CHECK_DOCUMENTS, and CHECK_CHARACTERS in all), bad records passed over."""
    sample: list[str] = []
    room = CHECK_CHARACTERS
    for path in files:
        for text, _ in iter_documents(path, corpus.text_field, BadRecords(skip=True)):
            if len(sample) == CHECK_DOCUMENTS or room <= 0:
                return sample
            sample.append(text[:room])
            room -= len(sample[-1])
    return sample


@dataclass
class BuildReport:
    """What a text build made: the table, the bad records it skipped (their count, the first few, and the documents
    whose lone surrogates were counted as U+FFFD), the shards resumed from checkpoints, the seconds it took (and of
    them, those spent reading and counting the corpus, after the tokenizers were loaded and checked), the bytes of
    corpus it read and the library that tokenized."""

    table: FrequencyTable
    bad: BadRecords
    resumed_shards: int
    seconds: float
    counting_seconds: float
    bytes_read: int
    tokenized_by: str

    @property
    def bad_records(self) -> int:
        return self.bad.count

    @property
    def bad_examples(self) -> list[str]:
        return self.bad.examples

    @property
    def surrogate_documents(self) -> int:
        return self.bad.surrogate_documents


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
    """Counts the tokens of text corpora as ``tokenizer`` (a transformers tokenizer or a ``tokenizers.Tokenizer``)
    tokenizes them, without special tokens, as ``counting`` says, reading them as ``corpus`` says, on ``workers``
    cores (default: all of this process's).

    ``counting.tokenizer_backend`` picks the library that tokenizes
    (:func:`~mia_fast.frequency.counting_tokenizers.choose_counter`):
    ``auto`` counts with ``fastokens`` once it has tokenized the corpus's first documents and a set of hard strings
    exactly as the model's tokenizer does, and warns (a :class:`MiaFastWarning`) where it falls back to that tokenizer.
    ``counting.vocab_size`` defaults to the tokenizer's; give the model's when its output head is larger.
    With ``checkpoint_dir`` every finished shard (input file) is kept there, and a rerun skips it; a build that
    stops before any shard counted a token removes the directory, which would hold nothing to resume.
    """
    started = time.perf_counter()
    workers = workers or available_cores()
    if workers < 1:
        raise MiaFastError(f"workers must be positive, got {workers}")
    settings, files, choice = settle_build(sources, tokenizer, counting, corpus)
    checkpoints = ShardCheckpoints(Path(checkpoint_dir), settings, files) if checkpoint_dir else None
    sizes = [path.stat().st_size for path in files]
    bar = Progress(sum(sizes), enabled=progress)
    tables: list[FrequencyTable | None] = [None] * len(files)
    bad = BadRecords(skip=corpus.skip_bad_records)
    try:
        for index in range(len(files)):
            finished = checkpoints.load(index) if checkpoints else None
            if finished is not None:
                tables[index], skipped = finished
                bad.count += skipped
                bar.advance(sizes[index], tables[index].tokens, tables[index].documents or 0)
        resumed = sum(table is not None for table in tables)
        pieces = [piece for i, path in enumerate(files) if tables[i] is None for piece in plan_pieces(i, path)]
        job = _piece_job(choice, settings, skip_bad_records=corpus.skip_bad_records)
        left = Counter(piece.file for piece in pieces)
        shards: dict[int, PieceCount] = {}
        counting_started = time.perf_counter()
        with worker_pool(min(workers, max(len(pieces), 1)), choice) as pool:
            for piece, count in counted_pieces(pieces, job, pool, 2 * workers):
                shard = shards.setdefault(piece.file, _empty(job))
                shard.add(count)
                bar.advance(piece.size, count.tokens, count.documents)
                left[piece.file] -= 1
                if left[piece.file] == 0:
                    tables[piece.file] = _shard_table(shards.pop(piece.file), files[piece.file], settings, choice)
                    bad.add(shard.bad)
                    if checkpoints:
                        checkpoints.save(piece.file, tables[piece.file], shard.bad.count)
        table = FrequencyTable.merge(tables, allow_overlap=True)  # distinct files (expand_sources), even if alike
        if table.tokens == 0:
            raise no_tokens(files)
    except BaseException:
        if checkpoints and not any(table is not None and table.tokens for table in tables):
            checkpoints.remove()
        raise
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    counting = time.perf_counter() - counting_started
    return BuildReport(table, bad, resumed, seconds, counting, sum(sizes), choice.counter.library)


def settle_build(
    sources: Sequence[str | os.PathLike], tokenizer: Any, counting: Counting, corpus: CorpusFormat
) -> tuple[dict[str, Any], list[Path], CounterChoice]:
    """What a text build settles before it counts: its settings (:func:`text_build_settings`), its files and its
    counting tokenizer, checked against the model's (with a warning where it fell back). The fast library builds its
    tokenizer on a thread of its own meanwhile: it is the longest step, and lets the others run beside it."""
    with ThreadPoolExecutor(1, thread_name_prefix="mia-fast-load") as loading:
        loading.submit(preload_fast, tokenizer, counting.tokenizer_backend)
        settings = text_build_settings(tokenizer, counting, corpus)
        files = expand_sources(sources)
        require_text(files, corpus)
        choice = choose_counter(tokenizer, counting.tokenizer_backend, corpus_sample(files, corpus))
    if choice.fell_back:
        warnings.warn(MiaFastWarning(choice.fell_back), stacklevel=3)
    return settings, files, choice


def _piece_job(choice: CounterChoice, settings: dict[str, Any], *, skip_bad_records: bool) -> PieceJob:
    return PieceJob(
        choice.recipe.key,
        settings["vocab_size"],
        settings["mode"],
        settings["max_tokens_per_doc"],
        settings["text_field"],
        skip_bad_records,
    )


def _empty(job: PieceJob) -> PieceCount:
    return PieceCount(np.zeros(job.vocab_size, dtype=np.uint64), bad=BadRecords(skip=job.skip_bad_records))


def _shard_table(shard: PieceCount, path: Path, settings: dict[str, Any], choice: CounterChoice) -> FrequencyTable:
    return FrequencyTable(
        shard.counts,
        shard.tokens,
        shard.documents,
        settings["mode"],
        settings["max_tokens_per_doc"],
        settings["tokenizer_fingerprint"],
        (TableSource.of(path),),
        (choice.counter.library,),
    )


def text_build_settings(
    tokenizer: Any,
    counting: Counting = Counting(),  # noqa: B008  (frozen dataclasses)
    corpus: CorpusFormat = CorpusFormat(),  # noqa: B008
) -> dict[str, Any]:
    """Everything a text build's table depends on besides its sources (checked here): what a resumed build
    must share with the one it continues, and what every shard of a distributed build is counted with."""
    check_counting_options(counting.mode, counting.max_tokens_per_doc)
    check_deterministic(tokenizer)
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
    path: Path, recipe: CounterRecipe, settings: dict[str, Any], *, workers: int = 1, skip_bad_records: bool = False
) -> tuple[FrequencyTable, BadRecords]:
    """One corpus file counted on its own with ``settings`` (:func:`text_build_settings`) and the counting tokenizer
    of ``recipe`` (one a build chose), and its bad records: one shard of a build, whose table is
    ``FrequencyTable.merge`` of its files' tables in order."""
    choice = CounterChoice(recipe, recipe.load())
    job = _piece_job(choice, settings, skip_bad_records=skip_bad_records)
    pieces = plan_pieces(0, path)
    shard = _empty(job)
    with worker_pool(min(workers, len(pieces)), choice) as pool:
        for _, count in counted_pieces(pieces, job, pool, 2 * workers):
            shard.add(count)
    return _shard_table(shard, path, settings, choice), shard.bad
