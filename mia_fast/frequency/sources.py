"""Where frequency tables come from: corpus files (text and pre-tokenized), read and streamed through
the counting core of :mod:`mia_fast.frequency.build` into a :class:`FrequencyTable`.

Text corpora are tokenized with the model's HF fast tokenizer in batches on worker threads (the
Rust tokenizer releases the GIL) and every batch is counted by the native core as soon as it is
tokenized, so counting overlaps tokenization. Formats, a directory or glob of shards of any mix:

- ``.txt``: one document per line (blank lines skipped);
- ``.jsonl``, ``.jsonl.gz`` and ``.json.gz``: one JSON object per line, as in C4's files;
- ``.parquet``: one row per document.

Pre-tokenized corpora are memory-mapped and counted by the native core across threads: raw
uint16/uint32 streams (nanoGPT ``.bin``, dolma's headerless ``.npy``), ``.npy`` files with a
header, and Megatron ``.bin``/``.idx`` pairs (documents from the index).
"""

from __future__ import annotations

import glob
import json
import os
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import write_atomic
from mia_fast.data.readers import BadRecord, decode_json_record, iter_lines, iter_parquet, parquet_columns
from mia_fast.errors import MiaFastError, shown
from mia_fast.frequency.build import (
    BatchCounter,
    TokenIdOutOfRange,
    check_counting_options,
    count_documents,
    counted_tokens,
    counting_tokenizer,
    parse_megatron_index,
    separator_offsets,
    tokenizer_vocab_size,
)
from mia_fast.frequency.table import FrequencyTable, FrequencyTableError, tokenizer_fingerprint

TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".parquet")
TOKEN_DTYPES = {"uint16": np.uint16, "uint32": np.uint32, "int32": np.int32, "int64": np.int64}
# Characters of text per tokenizer batch: large enough to amortise the call, small enough to stream.
BATCH_CHARS = 1 << 20
# Ids per native counting call on token files, so the progress bar moves on multi-GB files.
TOKEN_CHUNK = 1 << 27
_NPY_MAGIC = b"\x93NUMPY"
BAD_EXAMPLES = 5  # bad records quoted in a build report


def _suffix(path: Path, suffixes: Sequence[str]) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(suffixes, key=len, reverse=True) if name.endswith(s)), None)


def expand_sources(sources: Iterable[str | os.PathLike], suffixes: Sequence[str] = TEXT_SUFFIXES) -> list[Path]:
    """Files named directly, found under a directory (recursively, by suffix) or matched by a glob."""
    files: list[Path] = []
    for source in sources:
        text = os.fspath(source)
        path = Path(text)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and _suffix(p, suffixes))
            if not found:
                raise MiaFastError(f"{path}: no corpus files ({', '.join(suffixes)}) in this directory")
        elif glob.has_magic(text):
            found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not found:
                raise MiaFastError(f"{text}: the pattern matches no file")
        elif path.is_file():
            if not _suffix(path, suffixes):
                raise MiaFastError(f"{path}: unsupported corpus format; use one of {', '.join(suffixes)}")
            found = [path]
        else:
            raise MiaFastError(f"{path}: no such file or directory")
        files.extend(found)
    if not files:
        raise MiaFastError("no corpus files given")
    return files


@dataclass(frozen=True)
class Counting:
    """What a frequency table counts and into how many ids: ``mode`` ``occurrence`` counts every token,
    ``document`` the documents each token occurs in; ``max_tokens_per_doc`` counts only the first tokens of
    every document (None: all of them); ``vocab_size`` is the number of ids (a text build defaults to the
    tokenizer's: give the model's when its output head is larger; a token build needs it)."""

    mode: str = "occurrence"
    max_tokens_per_doc: int | None = None
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        check_counting_options(self.mode, self.max_tokens_per_doc)


@dataclass(frozen=True)
class CorpusFormat:
    """How text corpora are read: ``text_field`` names the field (JSON lines) or column (Parquet) that
    holds each document's text; with ``skip_bad_records`` records that are not valid UTF-8 or JSON or lack
    the field are skipped and counted, not an error."""

    text_field: str = "text"
    skip_bad_records: bool = False


@dataclass
class BadRecords:
    """Corpus records that are not valid UTF-8, not valid JSON or lack the text field: an error, or
    skipped and counted when ``skip`` is set."""

    skip: bool = False
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def record(self, where: str, reason: str) -> None:
        if not self.skip:
            raise MiaFastError(f"{where}: {reason} (skip such records with --skip-bad-records)")
        self.count += 1
        if len(self.examples) < BAD_EXAMPLES:
            self.examples.append(f"{where}: {reason}")


def iter_documents(path: Path, text_field: str, bad: BadRecords) -> Iterator[tuple[str, int]]:
    """(text, bytes of the file consumed so far) for every document of a corpus file."""
    suffix = _suffix(path, TEXT_SUFFIXES)
    try:
        if suffix == ".parquet":
            yield from _parquet_documents(path, text_field, bad)
            return
        for line_number, line, position in iter_lines(path):
            text = _line_text(line, suffix, text_field, f"{path}:{line_number}", bad)
            if text is not None:
                yield text, position
    except (OSError, EOFError, zlib.error) as exc:
        raise MiaFastError(f"{path}: cannot read: {exc}") from None


def _line_text(line: bytes, suffix: str, text_field: str, where: str, bad: BadRecords) -> str | None:
    if not line.strip():
        return None
    try:
        if suffix == ".txt":
            try:
                return line.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise BadRecord("utf8", f"not valid UTF-8 (byte {exc.start})", str(exc)) from None
        record = decode_json_record(line)
    except BadRecord as problem:
        bad.record(where, str(problem))
        return None
    if not isinstance(record.get(text_field), str):
        bad.record(where, f"no string field {shown(text_field)} (found: {', '.join(record)})")
        return None
    return record[text_field]


def _parquet_documents(path: Path, text_field: str, bad: BadRecords) -> Iterator[tuple[str, int]]:
    import pyarrow as pa

    try:
        columns = parquet_columns(path)
    except (pa.ArrowException, OSError) as exc:
        raise MiaFastError(f"{path}: cannot read: {exc}") from None
    if text_field not in columns:
        raise MiaFastError(f"{path}: no column {shown(text_field)} (columns: {', '.join(columns)})")
    for row, record, position in iter_parquet(path, [text_field]):
        value = record[text_field]
        if isinstance(value, str):
            yield value, position
        else:
            bad.record(f"{path}: row {row}", f"{shown(text_field)} is {type(value).__name__}, not text")


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


class _Progress:
    """A tqdm bar over input bytes (so it shows MB/s) with tokens/s and documents beside it; nothing,
    not even the tqdm import, when disabled."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, dynamic_ncols=True)
        self.started = time.perf_counter()
        self.tokens = self.documents = 0

    def advance(self, nbytes: int, tokens: int = 0, documents: int = 0) -> None:
        if self.bar is None:
            return
        self.tokens += tokens
        self.documents += documents
        rate = self.tokens / max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(f"{rate / 1e6:.2f}M tok/s, {self.documents} docs", refresh=False)
        self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class BuildReport:
    table: FrequencyTable
    bad_records: int
    bad_examples: list[str]
    resumed_shards: int
    seconds: float
    bytes_read: int


CHECKPOINTS_KIND = "mia-fast frequency build checkpoints v1"


def _is_checkpoints(directory: Path) -> bool:
    """Whether ``directory`` is a checkpoint folder of this tool (its manifest carries the tool's mark)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == CHECKPOINTS_KIND


def check_checkpoints(directory: Path) -> bool:
    """Whether a checkpoint folder of this tool is at ``directory``; anything else there (no manifest with the
    tool's mark) is the user's, refused in one line."""
    directory = Path(directory)
    if not (directory.is_symlink() or directory.exists()):
        return False
    if directory.is_symlink() or not directory.is_dir() or not _is_checkpoints(directory):
        raise MiaFastError(
            f"{directory} is not a checkpoint folder of mia-fast; it was left as it is: move it away, or choose "
            "another --out"
        )
    return True


def remove_checkpoints(directory: Path) -> None:
    """Removes a build's checkpoint folder (:func:`check_checkpoints`), file by file: a file of another name in it
    stays, and so does the folder, refused."""
    if not check_checkpoints(directory):
        return
    directory = Path(directory)
    for path in directory.iterdir():
        if path.name == "manifest.json" or (path.name.startswith(("shard-", ".shard-")) and path.is_file()):
            path.unlink()
    try:
        directory.rmdir()
    except OSError:
        raise MiaFastError(f"{directory} holds files mia-fast did not write; it was left as it is") from None


class ShardCheckpoints:
    """Finished shards of a text build, kept as tables in a directory so that a rerun resumes.

    The directory's manifest holds the tool's mark, the build settings and the sources (paths, sizes, modification
    times); a rerun with anything else refuses to mix the two builds, and a folder without the mark is refused.
    """

    def __init__(self, directory: Path, settings: dict[str, Any], files: Sequence[Path]):
        self.directory = directory
        self.manifest_path = directory / "manifest.json"
        identity = {"settings": settings, "sources": [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in files]}
        if check_checkpoints(directory):
            manifest = json.loads(self.manifest_path.read_text())
            if {k: manifest.get(k) for k in identity} != identity:
                raise MiaFastError(
                    f"{directory} holds an unfinished build with other settings or sources; "
                    "remove it (or pass --overwrite) to start over"
                )
            self.manifest = manifest
        else:
            directory.mkdir(parents=True, exist_ok=True)
            self.manifest = {"format": CHECKPOINTS_KIND, **identity, "bad_records": {}}
            self._write_manifest()

    def _shard_path(self, index: int) -> Path:
        return self.directory / f"shard-{index:06d}.freq"

    def load(self, index: int) -> tuple[FrequencyTable, int] | None:
        """The finished shard ``index`` and its skipped-record count, or None to count it (again)."""
        path, bad = self._shard_path(index), self.manifest["bad_records"].get(str(index))
        if bad is None or not path.is_file():
            return None
        try:
            return FrequencyTable.load(path), bad
        except FrequencyTableError:
            return None

    def save(self, index: int, table: FrequencyTable, bad_records: int) -> None:
        table.save(self._shard_path(index), overwrite=True)
        self.manifest["bad_records"][str(index)] = bad_records
        self._write_manifest()

    def _write_manifest(self) -> None:
        write_atomic(self.manifest_path, json.dumps(self.manifest, indent=1).encode())

    def remove(self) -> None:
        remove_checkpoints(self.directory)


def build_from_text(
    sources: Sequence[str | os.PathLike],
    tokenizer: Any,
    counting: Counting = Counting(),
    corpus: CorpusFormat = CorpusFormat(),
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
    bar = _Progress(total_bytes, progress)
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
            raise _no_tokens(files)
    except BaseException:
        if checkpoints and not any(table.tokens for table in tables):
            checkpoints.remove()
        raise
    finally:
        bar.close()
    return BuildReport(table, bad.count, bad.examples, resumed, time.perf_counter() - started, total_bytes)


def _no_tokens(files: Sequence[Path]) -> MiaFastError:
    return MiaFastError(f"the corpus ({len(files)} file(s)) holds no tokens to count")


def require_text(files: Sequence[Path], corpus: CorpusFormat = CorpusFormat()) -> None:
    """Refuses corpus files without a single non-empty document (or with a bad record before the first, unless
    ``corpus`` skips them), reading only up to that document: the check that needs no tokenizer."""
    bad = BadRecords(skip=corpus.skip_bad_records)
    if not any(text for path in files for text, _ in iter_documents(path, corpus.text_field, bad)):
        raise _no_tokens(files)


def text_build_settings(
    tokenizer: Any, counting: Counting = Counting(), corpus: CorpusFormat = CorpusFormat()
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
            _Progress(0, False),
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
    bar: _Progress,
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


# ---- pre-tokenized corpora ----


@dataclass(frozen=True)
class TokenFile:
    """A pre-tokenized source: its ids (memory-mapped) and, where known, its document offsets."""

    name: str
    ids: np.ndarray
    offsets: np.ndarray | None
    nbytes: int


def _memmap(path: Path, dtype: np.dtype, offset: int = 0) -> np.ndarray:
    if path.stat().st_size == offset:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset)


def open_token_file(source: str | os.PathLike, dtype: str | None) -> TokenFile:
    """Opens a raw token stream, an .npy file or a Megatron .bin/.idx pair (given as either file or the prefix)."""
    text = os.fspath(source)
    prefix = text[: -len(".bin")] if text.endswith((".bin", ".idx")) else text
    if Path(prefix + ".idx").is_file() and Path(prefix + ".bin").is_file():
        return _open_megatron(Path(prefix + ".idx"), Path(prefix + ".bin"), dtype)
    path = Path(text)
    if not path.is_file():
        raise MiaFastError(f"{path}: no such token file (nor a Megatron prefix with .bin and .idx)")
    with open(path, "rb") as f:
        has_npy_header = f.read(len(_NPY_MAGIC)) == _NPY_MAGIC
    if has_npy_header:
        try:
            ids = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise MiaFastError(f"{path}: not a readable .npy file: {exc}") from None
        if ids.ndim != 1 or ids.dtype.name not in TOKEN_DTYPES:
            raise MiaFastError(
                f"{path}: expected a 1-D array of {', '.join(TOKEN_DTYPES)}, got {ids.dtype} of shape {ids.shape}"
            )
        if dtype is not None and ids.dtype.name != dtype:
            raise MiaFastError(f"{path}: holds {ids.dtype.name} ids, not {dtype}")
        return TokenFile(str(path), ids, None, path.stat().st_size)
    if dtype is None:
        raise MiaFastError(f"{path}: a raw token file needs --dtype (uint16 or uint32)")
    numpy_dtype = np.dtype(TOKEN_DTYPES[dtype])
    size = path.stat().st_size
    if size % numpy_dtype.itemsize:
        raise MiaFastError(
            f"{path}: {size} bytes is not a whole number of {dtype} ids ({numpy_dtype.itemsize} bytes each)"
        )
    return TokenFile(str(path), _memmap(path, numpy_dtype), None, size)


def _open_megatron(index_path: Path, bin_path: Path, dtype: str | None) -> TokenFile:
    try:
        index = parse_megatron_index(np.fromfile(index_path, dtype=np.uint8))
    except ValueError as exc:
        raise MiaFastError(f"{index_path}: {exc}") from None
    if dtype is not None and dtype != index["dtype"]:
        raise MiaFastError(f"{index_path}: the index says {index['dtype']} ids, not {dtype}")
    expected, actual = index["total_tokens"] * index["item_size"], bin_path.stat().st_size
    if expected != actual:
        raise MiaFastError(
            f"{index_path} does not match {bin_path}: the index describes {expected} bytes of tokens, "
            f"the .bin holds {actual}"
        )
    ids = _memmap(bin_path, np.dtype(index["dtype"]))
    return TokenFile(str(bin_path.with_suffix("")), ids, index["document_offsets"], actual)


def _chunks(n_ids: int, offsets: np.ndarray | None) -> Iterator[tuple[int, int, np.ndarray | None]]:
    """(first id, end id, document offsets relative to the first id) of about TOKEN_CHUNK ids each,
    cut at document boundaries when there are documents."""
    if offsets is None:
        for start in range(0, n_ids, TOKEN_CHUNK):
            yield start, min(start + TOKEN_CHUNK, n_ids), None
        return
    first_document = 0
    while first_document < len(offsets) - 1:
        target = offsets[first_document] + TOKEN_CHUNK
        last_document = max(first_document + 1, int(np.searchsorted(offsets, target, side="right")) - 1)
        part = offsets[first_document : last_document + 1]
        yield int(part[0]), int(part[-1]), part - part[0]
        first_document = last_document


def build_from_tokens(
    files: Sequence[str | os.PathLike],
    counting: Counting,
    *,
    dtype: str | None = None,
    doc_separator: int | None = None,
    tokenizer_fingerprint: str | None = None,
    threads: int = 0,
    progress: bool = False,
) -> FrequencyTable:
    """Counts pre-tokenized files (see :func:`open_token_file`) with the native core, as ``counting`` says
    (its ``vocab_size`` is required: the ids are counted into that many).

    Document mode and ``max_tokens_per_doc`` need documents: a Megatron index gives them, a raw
    stream needs ``doc_separator`` (the id that ends every document, e.g. GPT-2's <|endoftext|>).
    """
    mode, max_tokens_per_doc, vocab_size = counting.mode, counting.max_tokens_per_doc, counting.vocab_size
    check_counting_options(mode, max_tokens_per_doc)
    if vocab_size is None:
        raise MiaFastError("build_from_tokens needs the vocabulary size: Counting(vocab_size=...)")
    if dtype is not None and dtype not in TOKEN_DTYPES:
        raise MiaFastError(f"dtype must be one of {', '.join(TOKEN_DTYPES)}, got {dtype!r}")
    sources = [open_token_file(f, dtype) for f in files]
    if not sources:
        raise MiaFastError("no token files given")
    if not any(len(source.ids) for source in sources):
        raise MiaFastError(f"the token files ({len(sources)}) hold no tokens to count")
    needs_documents = mode == "document" or bool(max_tokens_per_doc)
    counts = np.zeros(vocab_size, dtype=np.uint64)
    tokens, documents = 0, 0
    bar = _Progress(sum(s.nbytes for s in sources), progress)
    try:
        for source in sources:
            offsets = source.offsets
            if offsets is None and doc_separator is not None:
                offsets = separator_offsets(source.ids, doc_separator)
            if needs_documents and offsets is None:
                raise MiaFastError(
                    f"{source.name}: {mode} mode and max_tokens_per_doc need documents; "
                    "give --doc-separator for a raw token stream"
                )
            documents = None if documents is None or offsets is None else documents + len(offsets) - 1
            for start, end, part in _chunks(len(source.ids), offsets):
                ids = np.ascontiguousarray(source.ids[start:end])
                try:
                    counts += count_documents(ids, part, vocab_size, mode, max_tokens_per_doc, threads)
                except TokenIdOutOfRange as exc:
                    raise MiaFastError(
                        f"{source.name}: token id {exc.token_id} at position {start + exc.position} "
                        f"is outside the vocabulary [0, {vocab_size})"
                    ) from None
                chunk_tokens = counted_tokens(np.diff(part), max_tokens_per_doc) if part is not None else end - start
                tokens += chunk_tokens
                bar.advance((end - start) * source.ids.itemsize, chunk_tokens, 0 if part is None else len(part) - 1)
    finally:
        bar.close()
    return FrequencyTable(
        counts, tokens, documents, mode, max_tokens_per_doc, tokenizer_fingerprint, tuple(s.name for s in sources)
    )
