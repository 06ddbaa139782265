"""Reading each file format, streamed: lines (plain, gzip or zstd), JSON lines, csv, parquet and JSON arrays, shared by
datasets, output formats and reference corpora.

Readers yield records with their line (or row) number and how far into the file the reader is, so callers can
report ``file:line`` and drive a progress bar; the line-oriented formats also give the byte offset where each row
starts, so that a shard is read from there without what comes before it. Whether a bad record stops the read or is
skipped is the caller's policy: :func:`decode_json_record` raises :class:`BadRecord`.
"""

from __future__ import annotations

import codecs
import csv
import errno
import gzip
import io
import json
import os
import stat
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mia_fast.errors import MiaFastError, shown

# GZIP and ZSTD: the modules that read (and benchmarks/freq.py times) gzip and zstd files.
try:  # ISA-L's gzip, measured 2.2x the standard library's inflate (benchmarks/freq.py)
    from isal import igzip as GZIP
    from isal.isal_zlib import error as _isal_error
except ImportError:  # no wheel for this platform
    GZIP, _isal_error = gzip, zlib.error
try:
    from compression import zstd as ZSTD  # Python 3.14
except ImportError:
    from backports import zstd as ZSTD

Records = Iterator[tuple[int, dict[str, Any], int]]
# Each compression a reader inflates, by the suffixes that name it (".zstd" is the zstd tool's other spelling).
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}
# What reading a damaged or truncated compressed file raises, besides OSError.
DECOMPRESSION_ERRORS = (OSError, EOFError, zlib.error, _isal_error, ZSTD.ZstdError)


class BadRecord(ValueError):
    """A line that is not a JSON object: ``kind`` is ``utf8``, ``json`` or ``type``."""

    def __init__(self, kind: str, reason: str, detail: str):
        super().__init__(reason)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class RowPosition:
    """Where a run of rows starts in a data file: the 0-based index of its first row, that row's line (or row)
    number, and where the file's format gives one the byte offset of its first line (None: read from the start and
    skip)."""

    row: int
    number: int
    offset: int | None = None


def compression(path: Path) -> str | None:
    """``gzip`` or ``zstd`` where the file's name ends with one of :data:`COMPRESSIONS` (in any case), else None."""
    name = path.name.lower()
    return next((kind for suffix, kind in COMPRESSIONS.items() if name.endswith(suffix)), None)


def is_compressed(path: Path) -> bool:
    return compression(path) is not None


def decompressed(raw: BinaryIO, path: Path) -> BinaryIO:
    """The bytes of an open ``.gz``, ``.zst`` or ``.zstd`` file as they were before compression (every frame or member
    of it; a truncated one raises EOFError at its end), or ``raw`` itself for any other file."""
    kind = compression(path)
    if kind == "gzip":
        return GZIP.GzipFile(fileobj=raw)
    if kind == "zstd":
        return ZSTD.ZstdFile(raw)
    return raw


def iter_lines(path: Path, offset: int = 0, first_line: int = 1) -> Iterator[tuple[int, bytes, int]]:
    """(line number, raw line, bytes of the file read so far) of a plain, gzip- or zstd-compressed text file, from
    byte ``offset`` of a plain file on (numbering its first line ``first_line``). A UTF-8 byte-order mark that starts
    the file (as spreadsheet programs write one) is not part of its first line; byte offsets still count it."""
    if offset and is_compressed(path):
        raise ValueError("a compressed file is read from its start")
    with open(path, "rb") as raw:
        raw.seek(offset)
        for number, line in enumerate(decompressed(raw, path), start=first_line):
            if number == first_line and offset == 0:
                line = line.removeprefix(codecs.BOM_UTF8)
            yield number, line, raw.tell()


class RepeatedFields(dict):
    """A JSON object that names some fields more than once (``repeated``), holding each one's last value as ``json``
    does: a reader of one of them refuses the record (:func:`repeated_field`), for which value was meant is a guess."""

    repeated: frozenset[str] = frozenset()


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) == len(pairs):
        return record
    seen: set[str] = set()
    marked = RepeatedFields(record)
    marked.repeated = frozenset(key for key, _ in pairs if key in seen or seen.add(key))
    return marked


def repeated_field(record: dict[str, Any], fields: Sequence[str | None]) -> str | None:
    """The first of ``fields`` that ``record`` names more than once, if any."""
    if type(record) is not RepeatedFields:
        return None
    return next((field for field in fields if field in record.repeated), None)


# One decoder for every record: json.loads given a hook builds a decoder per call, 8-9% of the CPU time of a corpus's
# reading line by line and of read_dataset's; with one, the hook costs under 1% (shared by threads: its scanner keeps
# no state between calls but a cache of keys).
_RECORDS = json.JSONDecoder(object_pairs_hook=_json_object)


def decode_json_record(line: bytes) -> dict[str, Any]:
    """One JSON-lines record as a dict (a :class:`RepeatedFields` where it names a field twice); a line that is not
    UTF-8 JSON of an object raises BadRecord. The line is decoded strictly, as ``json`` does not: its ``surrogatepass``
    would read the raw bytes of a surrogate (ED A0 80) as a lone surrogate, which only an escape may spell."""
    try:
        text = line.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark, which json reads bytes past
    except UnicodeDecodeError as exc:
        raise BadRecord("utf8", not_utf8(exc), str(exc)) from None
    try:
        record = _RECORDS.decode(text)
    except ValueError as exc:  # json's own errors, and an integer too long for Python's int (4300 digits)
        message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split(";")[0]
        raise BadRecord("json", f"not valid JSON ({message})", message) from None
    if not isinstance(record, dict):
        kind = type(record).__name__
        raise BadRecord("type", f"expected a JSON object, got {kind}", kind)
    return record


def skip_to(records: Records, start: RowPosition) -> Records:
    """The records from ``start.row`` on: reached by seeking where ``start`` has an offset, else by reading past
    them."""
    skip = 0 if start.offset is not None else start.row
    for index, record in enumerate(records):
        if index >= skip:
            yield record


def jsonl_records(path: Path, start: RowPosition) -> Records:
    """The JSON-lines records of ``path`` from ``start`` on (blank lines are no records); a line that is no JSON object
    stops the read with its line number."""
    return skip_to(_jsonl_records(path, start), start)


def _jsonl_records(path: Path, start: RowPosition) -> Records:
    first_line = start.number if start.offset is not None else 1
    for line_number, line, position in iter_lines(path, start.offset or 0, first_line):
        if not line.strip():
            continue
        try:
            yield line_number, decode_json_record(line), position
        except BadRecord as bad:
            reason = f"malformed JSON: {bad.detail}" if bad.kind == "json" else str(bad)
            raise MiaFastError(f"{path}:{line_number}: {reason}") from None


def jsonl_row_starts(path: Path) -> Iterator[RowPosition]:
    """The position of each record of a plain JSON-lines file, with the byte offset where its line starts."""
    row, previous_end = 0, 0
    for line_number, line, position in iter_lines(path):
        if line.strip():
            yield RowPosition(row, line_number, previous_end)
            row += 1
        previous_end = position


class _DecodedLines:
    """The lines of a utf-8 file from byte ``offset`` on, as text, and ``end``: the byte offset read to (a csv reader
    pulls lines ahead of the row it yields)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path, self.offset, self.end = path, offset, offset

    def __iter__(self) -> Iterator[str]:
        for _, line, line_end in iter_lines(self.path, self.offset):
            self.end = line_end
            yield line.decode("utf-8")


def csv_records(path: Path, start: RowPosition) -> Records:
    """Rows from ``start`` on, numbered as a spreadsheet does (the header is row 1); a quoted field may span lines."""
    return skip_to(_csv_records(path, start), start)


def _csv_records(path: Path, start: RowPosition) -> Records:
    header = next(csv.reader(_DecodedLines(path)), None)
    if header is None:
        return
    refuse_repeated_columns(path, header)
    lines = _DecodedLines(path, start.offset or 0)
    if start.offset is None:
        rows, first = csv.DictReader(lines), 2
    else:
        rows, first = csv.DictReader(lines, fieldnames=header), start.number
    for number, record in enumerate(rows, start=first):
        yield number, record, lines.end


def csv_row_starts(path: Path) -> Iterator[RowPosition]:
    """The position of each data row of a csv file, with the byte offset where it starts (a quoted field may span
    lines; blank lines are not rows, as csv.DictReader reads them)."""
    lines = _DecodedLines(path)
    reader = csv.reader(lines)
    next(reader, None)
    row, row_start = 0, lines.end
    for fields in reader:
        if fields:
            yield RowPosition(row, row + 2, row_start)
            row += 1
        row_start = lines.end


def json_array_records(path: Path, start: RowPosition) -> Records:
    """The objects of a JSON array (read whole: an input only) from ``start.row`` on, numbered from 1."""
    # utf-8-sig: a byte-order mark before the array is no JSON error.
    with open(path, "rb") as raw, io.TextIOWrapper(decompressed(raw, path), encoding="utf-8-sig") as f:
        try:
            document = json.load(f, object_pairs_hook=_json_object)
        except json.JSONDecodeError as exc:
            raise MiaFastError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(document, list) or not all(isinstance(r, dict) for r in document):
        raise MiaFastError(f"{path}: expected a JSON array of objects")
    size = path.stat().st_size
    yield from ((number, record, size) for number, record in list(enumerate(document, start=1))[start.row :])


def iter_parquet(path: Path, columns: Sequence[str] | None = None, first_row: int = 0) -> Records:
    """(row number, record, approximate bytes read so far) of a parquet file from row ``first_row`` (0-based) on,
    one row group in memory at a time; the row groups before it are skipped unread."""
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

    parquet = pq.ParquetFile(path)
    refuse_repeated_columns(path, parquet.schema_arrow.names)
    size, groups, row = path.stat().st_size, parquet.num_row_groups, 0
    for group in range(groups):
        group_rows = parquet.metadata.row_group(group).num_rows
        if row + group_rows <= first_row:
            row += group_rows
            continue
        table = parquet.read_row_group(group, columns=list(columns) if columns else None)
        try:
            records = table.to_pylist()
        except UnicodeDecodeError:
            raise _invalid_utf8(path, table, row) from None
        skip = max(first_row - row, 0)
        for number, record in enumerate(records[skip:], start=row + skip + 1):
            yield number, record, size * (group + 1) // groups
        row += group_rows


def _invalid_utf8(path: Path, table: Any, rows_before: int) -> MiaFastError:
    """The line for the first value of a parquet row group (``rows_before`` rows after the file's start) whose string
    is not valid UTF-8, which pyarrow's writers take unchecked and its reader refuses."""
    found = [
        (number, name, value)
        for name, values in zip(table.column_names, table.columns)
        for number, value in enumerate(column_values(values), start=rows_before + 1)
        if isinstance(value, UnicodeDecodeError)
    ]
    if not found:
        return MiaFastError(f"{path}: cannot read: a string is not valid UTF-8")
    number, name, value = min(found, key=lambda bad: bad[0])
    return MiaFastError(f"{path}: row {number}: {shown(name)} is {not_utf8(value)}")


def column_values(values: Any) -> list[Any]:
    """The values of a pyarrow column as Python objects; a string that is not valid UTF-8 is the UnicodeDecodeError of
    its bytes (a bad record for the caller to refuse or skip), not the end of the read."""
    try:
        return values.to_pylist()
    except UnicodeDecodeError:
        return [_value(values, index) for index in range(len(values))]


def _value(values: Any, index: int) -> Any:
    try:
        return values[index].as_py()
    except UnicodeDecodeError as exc:
        return exc


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a bad record that is not valid UTF-8 is, as a line says it."""
    return f"not valid UTF-8 (byte {exc.start})"


def refuse_repeated_columns(path: Path, columns: Sequence[str]) -> None:
    """One line for a header that names a column twice: which of the two a run read would be a silent guess."""
    seen: set[str] = set()
    for column in columns:
        if column.strip() and column in seen:
            raise MiaFastError(f"{path}: the column {shown(column)} is named twice in the header; rename one")
        seen.add(column)


def file_kind(mode: int) -> str:
    """What a path that is no regular file is, as a line names it."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def read_small_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of a small file read whole (``-``: standard input), refused in one line where the path is missing,
    a loop of links, no regular file or unreadable, or the file is over ``limit`` bytes: ``what`` names the file
    the caller expects."""
    if path == "-":
        where = "standard input"
        try:
            data = sys.stdin.buffer.read(limit + 1)
        except (AttributeError, OSError, ValueError) as exc:  # no stdin, or one closed or captured
            raise MiaFastError(f"cannot read {what} from standard input: {exc}") from None
    else:
        where = shown(path, quote=False)
        try:
            mode = os.stat(path).st_mode  # stat, not open: opening a FIFO with no writer would wait for one
            if not stat.S_ISREG(mode):
                raise MiaFastError(f"{where} is {file_kind(mode)}, not {what}")
            with open(path, "rb") as f:
                data = f.read(limit + 1)
        except FileNotFoundError:
            dangling = os.path.islink(path)
            raise MiaFastError(f"{where}: {'a link to nothing' if dangling else 'no such file'}") from None
        except OSError as exc:
            loop = exc.errno == errno.ELOOP
            raise MiaFastError(f"{where}: {'a loop of links' if loop else f'cannot read: {exc.strerror}'}") from None
    if len(data) > limit:
        raise MiaFastError(f"{where} is over {limit:,} bytes: too large for {what}")
    return data
