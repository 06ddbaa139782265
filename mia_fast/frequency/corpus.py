"""Text corpora of a frequency-table build: the files a source names (a file, a directory of shards, a glob), how
they are read (:class:`CorpusFormat`), the text of one line, and every document of a file with how far into the file
it is. Formats, any mix, by one table of suffixes (:data:`CORPUS_SUFFIXES`, in any case) for a file, a directory and
a glob: ``.txt`` (one document per line, blank lines skipped) and ``.jsonl`` or ``.json`` lines, each plain, gzip- or
zstd-compressed (one JSON object per line: C4's ``.json.gz``, RedPajama's and Dolma's ``.jsonl.zst``), and
``.parquet`` (one row per document: FineWeb); what a directory or a glob holds besides is named in one warning line.
A bad record (not valid UTF-8, not JSON, no text) stops the read, or is skipped and counted (:class:`BadRecords`); a
lone surrogate escaped in JSON is counted as U+FFFD, as scoring tokenizes it."""

from __future__ import annotations

import errno
import glob
import os
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mia_fast.data.readers import (
    COMPRESSIONS,
    DECOMPRESSION_ERRORS,
    BadRecord,
    column_values,
    decode_json_record,
    file_kind,
    iter_lines,
    not_utf8,
    refuse_repeated_columns,
    repeated_field,
)
from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, MiaFastWarning, shown

# The corpus formats by suffix, matched in any case: the line formats plain or compressed (parquet compresses inside).
CORPUS_SUFFIXES: dict[str, str] = {
    **{
        base + packed: kind
        for base, kind in ((".txt", "txt"), (".jsonl", "json"), (".json", "json"))
        for packed in ("", *COMPRESSIONS)
    },
    ".parquet": "parquet",
}
_LONGEST_FIRST = sorted(CORPUS_SUFFIXES, key=len, reverse=True)
FORMATS = ".txt, .jsonl or .json lines, each plain, .gz, .zst or .zstd; .parquet; in any case"
BAD_EXAMPLES = 5  # bad records quoted in a build report


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return next((suffix for suffix in _LONGEST_FIRST if name.endswith(suffix)), None)


def expand_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """Files named directly, found under a directory (recursively) or matched by a glob, each read by its suffix; what
    a directory or a glob holds besides is named in one warning line per source, by count and suffix. A file reached
    twice (named twice, inside a folder also given, through a link) is refused: it would be counted twice."""
    files: list[Path] = []
    named: list[str] = []  # how the sources named each file
    for source in sources:
        text = os.fspath(source)
        path = Path(text)
        if path.is_dir():
            found, skipped = _sorted_out(path.rglob("*"))
            if not found:
                raise MiaFastError(f"{path}: no corpus files ({FORMATS}) in this directory{skipped.instead('holds')}")
            skipped.warn(f"in {path}")
        elif glob.has_magic(text):
            found, skipped = _sorted_out(map(Path, glob.glob(text, recursive=True)))
            if not found:
                what = "corpus file" if skipped.kinds else "file"
                raise MiaFastError(f"{text}: the pattern matches no {what}{skipped.instead('matches')}")
            skipped.warn(f"matched by {text}")
        elif path.is_file():
            corpus_format(path)
            found = [path]
        else:
            raise MiaFastError(f"{path}: {_missing(path)}")
        files.extend(found)
        named.extend([text] if found == [path] else [f"{p} (in {text})" for p in found])
    if not files:
        raise MiaFastError("no corpus files given")
    _refuse_repeats(files, named)
    return files


@dataclass
class _Skipped:
    """What a directory or a glob holds besides corpus files, counted by kind: a suffix, a loop of links, a FIFO..."""

    kinds: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        return ", ".join(f"{count} {kind}" for kind, count in sorted(self.kinds.items(), key=lambda k: (-k[1], k[0])))

    def instead(self, verb: str) -> str:
        """What there is instead, for the line that refuses a source with no corpus file."""
        return f"; it {verb} {self}" if self.kinds else ""

    def warn(self, where: str) -> None:
        count = sum(self.kinds.values())
        if count:
            files = "1 file" if count == 1 else f"{count} files"
            warnings.warn(
                MiaFastWarning(f"skipped {files} {where} that {'is' if count == 1 else 'are'} no corpus file: {self}"),
                stacklevel=3,
            )


def _sorted_out(paths: Iterable[Path]) -> tuple[list[Path], _Skipped]:
    """The corpus files among ``paths`` (sorted), and what the others are; directories are neither."""
    found, skipped = [], _Skipped()
    for path in paths:
        if path.is_file():
            if _suffix(path):
                found.append(path)
            else:
                skipped.kinds[path.suffix.lower() or "without a suffix"] += 1
        elif path.is_symlink() and path.is_dir():
            skipped.kinds["link to a directory (not followed)"] += 1
        elif not path.is_dir():
            skipped.kinds[_kind(path).removeprefix("a ")] += 1
    return sorted(found), skipped


_LOOP, _DANGLING, _MISSING = "a loop of links", "a link to nothing", "no such file or directory"


def _kind(path: Path) -> str:
    """What a path that is no regular file is (a loop of links, a link to nothing, a named pipe, ...)."""
    try:
        mode = path.stat().st_mode  # stat, not open: opening a FIFO with no writer would wait for one
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return _LOOP
        return _DANGLING if path.is_symlink() else _MISSING
    return file_kind(mode)


def _missing(path: Path) -> str:
    """Why a source that is neither a folder nor a file is not a corpus file."""
    kind = _kind(path)
    if kind in (_LOOP, _DANGLING, _MISSING):
        return kind
    return f"{kind}, not a corpus file (a build reads each file in pieces, more than once)"


def _refuse_repeats(files: Sequence[Path], named: Sequence[str]) -> None:
    first: dict[tuple[int, int], int] = {}
    for index, path in enumerate(files):
        status = path.stat()
        seen = first.setdefault((status.st_dev, status.st_ino), index)
        if seen != index:
            raise MiaFastError(
                f"one file is given twice, as {named[seen]} and as {named[index]}: its documents would be counted "
                "twice; give each corpus file once"
            )


@dataclass(frozen=True)
class CorpusFormat:
    """How text corpora are read: ``text_field`` names the field (JSON lines) or column (Parquet) that
    holds each document's text; with ``skip_bad_records`` records that are not valid UTF-8 or JSON or lack
    the field are skipped and counted, not an error."""

    text_field: str = "text"
    skip_bad_records: bool = False


@dataclass
class BadRecords:
    """Corpus records that are not valid UTF-8 or JSON or lack the text field (an error, or skipped and counted when
    ``skip`` is set), and the documents whose lone surrogates were counted as U+FFFD."""

    skip: bool = False
    count: int = 0
    examples: list[str] = field(default_factory=list)
    surrogate_documents: int = 0

    def record(self, where: str, reason: str) -> None:
        if not self.skip:
            raise MiaFastError(f"{where}: {reason} (skip such records with --skip-bad-records)")
        self.count += 1
        if len(self.examples) < BAD_EXAMPLES:
            self.examples.append(f"{where}: {reason}")

    def add(self, other: BadRecords) -> None:
        """Adds the records of a later part of the corpus (its examples after these)."""
        self.count += other.count
        self.examples = (self.examples + other.examples)[:BAD_EXAMPLES]
        self.surrogate_documents += other.surrogate_documents


def corpus_format(path: Path) -> str:
    """The format of a corpus file by its suffix: ``txt`` or ``json`` (JSON lines), compressed or not, or
    ``parquet``."""
    suffix = _suffix(path)
    if suffix is None:
        raise MiaFastError(f"{path}: unsupported corpus format; use {FORMATS}")
    return CORPUS_SUFFIXES[suffix]


def iter_documents(path: Path, text_field: str, bad: BadRecords) -> Iterator[tuple[str, int]]:
    """(text, bytes of the file consumed so far) for every document of a corpus file."""
    kind = corpus_format(path)
    try:
        if kind == "parquet":
            yield from _parquet_documents(path, text_field, bad)
            return
        for line_number, line, position in iter_lines(path):
            text = line_text(line, kind, text_field, bad, lambda n=line_number: f"{path}:{n}")
            if text is not None:
                yield text, position
    except DECOMPRESSION_ERRORS as exc:
        raise cannot_read(path, exc) from None


def cannot_read(path: Path, exc: BaseException) -> MiaFastError:
    return MiaFastError(f"{path}: cannot read: {exc}")


def line_text(line: bytes, kind: str, text_field: str, bad: BadRecords, where: Callable[[], str]) -> str | None:
    """The document of one line of a ``txt`` or ``json`` corpus file, or None for a blank or bad line (``where``
    names the line, asked only for a bad one)."""
    if not line or line.isspace():
        return None
    try:
        if kind == "txt":
            try:
                return line.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise BadRecord("utf8", not_utf8(exc), str(exc)) from None
        record = decode_json_record(line)
    except BadRecord as problem:
        array = kind == "json" and line.lstrip().startswith(b"[")
        bad.record(where(), f"{problem}{' (a .json corpus is JSON lines, not an array)' if array else ''}")
        return None
    text = record.get(text_field)
    if repeated_field(record, (text_field,)):
        bad.record(where(), f"the field {shown(text_field)} is named more than once")
        return None
    if not isinstance(text, str):
        bad.record(where(), f"no string field {shown(text_field)} (found: {', '.join(record)})")
        return None
    text, replaced = replace_lone_surrogates(text)  # json reads lone surrogates, which no tokenizer takes
    bad.surrogate_documents += replaced > 0
    return text


def _parquet_documents(path: Path, text_field: str, bad: BadRecords) -> Iterator[tuple[str, int]]:
    for texts, position in parquet_texts(path, text_field, bad):
        for text in texts:
            yield text, position


def parquet_texts(
    path: Path, text_field: str, bad: BadRecords, groups: range | None = None
) -> Iterator[tuple[list[str], int]]:
    """The texts of each row group of a parquet file (of ``groups``: all by default), with about how many bytes of
    the file are read by its end; a row whose text is no string, or no valid UTF-8, is a bad record."""
    import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

    try:
        parquet = pq.ParquetFile(path)
        columns = parquet.schema_arrow.names
        if text_field not in columns:
            raise MiaFastError(f"{path}: no column {shown(text_field)} (columns: {', '.join(columns)})")
        refuse_repeated_columns(path, columns)
        count, size = parquet.num_row_groups, path.stat().st_size
        groups = range(count) if groups is None else groups
        row = sum(parquet.metadata.row_group(g).num_rows for g in range(groups.start))
        for group in groups:
            texts = []
            for value in column_values(parquet.read_row_group(group, columns=[text_field]).column(0)):
                row += 1
                if isinstance(value, str):
                    texts.append(value)
                elif isinstance(value, UnicodeDecodeError):
                    bad.record(f"{path}: row {row}", f"{shown(text_field)} is {not_utf8(value)}")
                else:
                    bad.record(f"{path}: row {row}", f"{shown(text_field)} is {type(value).__name__}, not text")
            yield texts, size * (group + 1) // count
    except (pa.ArrowException, OSError) as exc:
        raise cannot_read(path, exc) from None


def no_tokens(files: Sequence[Path]) -> MiaFastError:
    """The error of a corpus that holds no token to count."""
    return MiaFastError(f"the corpus ({len(files)} file(s)) holds no tokens to count")


def require_text(files: Sequence[Path], corpus: CorpusFormat = CorpusFormat()) -> None:
    """Refuses corpus files without a single non-empty document (or with a bad record before the first, unless
    ``corpus`` skips them), reading only up to that document: the check that needs no tokenizer."""
    bad = BadRecords(skip=corpus.skip_bad_records)
    if not any(text for path in files for text, _ in iter_documents(path, corpus.text_field, bad)):
        raise no_tokens(files)
