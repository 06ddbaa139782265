"""Text corpora of a frequency-table build: the files a source names (a file, a directory of shards, a glob), how
they are read (:class:`CorpusFormat`), and every document of a file with how far into the file it is. Formats, any
mix: ``.txt`` (one document per line, blank lines skipped), ``.jsonl``, ``.jsonl.gz`` and ``.json.gz`` (one JSON
object per line, as in C4's files) and ``.parquet`` (one row per document). A bad record stops the read, or is skipped
and counted (:class:`BadRecords`)."""

from __future__ import annotations

import glob
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mia_fast.data.readers import BadRecord, decode_json_record, iter_lines, iter_parquet, parquet_columns
from mia_fast.errors import MiaFastError, shown

TEXT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".parquet")
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


def no_tokens(files: Sequence[Path]) -> MiaFastError:
    """The error of a corpus that holds no token to count."""
    return MiaFastError(f"the corpus ({len(files)} file(s)) holds no tokens to count")


def require_text(files: Sequence[Path], corpus: CorpusFormat = CorpusFormat()) -> None:
    """Refuses corpus files without a single non-empty document (or with a bad record before the first, unless
    ``corpus`` skips them), reading only up to that document: the check that needs no tokenizer."""
    bad = BadRecords(skip=corpus.skip_bad_records)
    if not any(text for path in files for text, _ in iter_documents(path, corpus.text_field, bad)):
        raise no_tokens(files)
