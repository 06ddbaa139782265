"""Text corpora of a frequency-table build: the files a source names (a file, a directory of shards, a glob), how
they are read (:class:`CorpusFormat`), the text of one line, and every document of a file with how far into the file
it is. Formats, any mix: ``.txt`` (one document per line, blank lines skipped), ``.jsonl`` and ``.json`` lines, plain,
gzip- or zstd-compressed (one JSON object per line: C4's ``.json.gz``, RedPajama's and Dolma's ``.jsonl.zst``) and
``.parquet`` (one row per document: FineWeb). A bad record stops the read, or is skipped and counted
(:class:`BadRecords`); a lone surrogate escaped in JSON is counted as U+FFFD, as scoring tokenizes it."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mia_fast.data.readers import (
    DECOMPRESSION_ERRORS,
    BadRecord,
    decode_json_record,
    file_kind,
    iter_lines,
    refuse_repeated_columns,
    repeated_field,
)
from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, shown

TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".parquet")
BAD_EXAMPLES = 5  # bad records quoted in a build report


def _suffix(path: Path, suffixes: Sequence[str]) -> str | None:
    name = path.name.lower()
    return next((s for s in sorted(suffixes, key=len, reverse=True) if name.endswith(s)), None)


def expand_sources(sources: Iterable[str | os.PathLike], suffixes: Sequence[str] = TEXT_SUFFIXES) -> list[Path]:
    """Files named directly, found under a directory (recursively, by suffix) or matched by a glob; a file reached
    twice (named twice, inside a folder also given, through a link) is refused: it would be counted twice."""
    files: list[Path] = []
    named: list[str] = []  # how the sources named each file
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
            raise MiaFastError(f"{path}: {_missing(path)}")
        files.extend(found)
        named.extend([text] if found == [path] else [f"{p} (in {text})" for p in found])
    if not files:
        raise MiaFastError("no corpus files given")
    _refuse_repeats(files, named)
    return files


def _missing(path: Path) -> str:
    """Why a source that is neither a folder nor a file is not a corpus file."""
    try:
        mode = path.stat().st_mode  # stat, not open: opening a FIFO with no writer would wait for one
    except OSError:
        return "a link to nothing" if path.is_symlink() else "no such file or directory"
    return f"{file_kind(mode)}, not a corpus file (a build reads each file in pieces, more than once)"


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
    """The format of a corpus file by its suffix: ``txt``, ``json`` (JSON lines, compressed or not) or ``parquet``."""
    suffix = _suffix(path, TEXT_SUFFIXES) or ""
    return "parquet" if suffix == ".parquet" else "txt" if suffix == ".txt" else "json"


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
                raise BadRecord("utf8", f"not valid UTF-8 (byte {exc.start})", str(exc)) from None
        record = decode_json_record(line)
    except BadRecord as problem:
        bad.record(where(), str(problem))
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
    the file are read by its end; a row whose text is no string is a bad record."""
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
            for value in parquet.read_row_group(group, columns=[text_field]).column(0).to_pylist():
                row += 1
                if isinstance(value, str):
                    texts.append(value)
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
