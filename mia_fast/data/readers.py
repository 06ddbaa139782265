"""Streaming readers for line-oriented and parquet files, shared by datasets and reference corpora.

They yield records with their line (or row) number and how far into the file the reader is, so
callers can report ``file:line`` and drive a progress bar. Whether a bad record stops the read or
is skipped is the caller's policy: :func:`decode_json_record` raises :class:`BadRecord`.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import json
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.errors import MiaFastError, shown


class BadRecord(ValueError):
    """A line that is not a JSON object: ``kind`` is ``utf8``, ``json`` or ``type``."""

    def __init__(self, kind: str, reason: str, detail: str):
        super().__init__(reason)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class RowPosition:
    """Where a run of rows starts in a data file: the 0-based index of its first row, that row's line (or row)
    number, and for plain .jsonl and .csv the byte offset of its first line (None: read from the start and skip)."""

    row: int
    number: int
    offset: int | None = None


def iter_lines(path: Path, offset: int = 0, first_line: int = 1) -> Iterator[tuple[int, bytes, int]]:
    """(line number, raw line, bytes of the file read so far) of a plain or gzip-compressed text file, from byte
    ``offset`` of a plain file on (numbering its first line ``first_line``). A UTF-8 byte-order mark that starts
    the file (as spreadsheet programs write one) is not part of its first line; byte offsets still count it."""
    compressed = path.name.lower().endswith(".gz")
    if offset and compressed:
        raise ValueError("a gzip-compressed file is read from its start")
    with open(path, "rb") as raw:
        raw.seek(offset)
        lines = gzip.GzipFile(fileobj=raw) if compressed else raw
        for number, line in enumerate(lines, start=first_line):
            if number == first_line and offset == 0:
                line = line.removeprefix(codecs.BOM_UTF8)
            yield number, line, raw.tell()


def decode_json_record(line: bytes) -> dict[str, Any]:
    """One JSON-lines record as a dict; a line that is not UTF-8 JSON of an object raises BadRecord."""
    try:
        record = json.loads(line)
    except UnicodeDecodeError as exc:
        raise BadRecord("utf8", f"not valid UTF-8 (byte {exc.start})", str(exc)) from None
    except json.JSONDecodeError as exc:
        raise BadRecord("json", f"not valid JSON ({exc.msg})", exc.msg) from None
    if not isinstance(record, dict):
        kind = type(record).__name__
        raise BadRecord("type", f"expected a JSON object, got {kind}", kind)
    return record


def iter_parquet(
    path: Path, columns: Sequence[str] | None = None, first_row: int = 0
) -> Iterator[tuple[int, dict[str, Any], int]]:
    """(row number, record, approximate bytes read so far) of a parquet file from row ``first_row`` (0-based) on,
    one row group in memory at a time; the row groups before it are skipped unread."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    refuse_repeated_columns(path, parquet.schema_arrow.names)
    size, groups, row = path.stat().st_size, parquet.num_row_groups, 0
    for group in range(groups):
        group_rows = parquet.metadata.row_group(group).num_rows
        if row + group_rows <= first_row:
            row += group_rows
            continue
        records = parquet.read_row_group(group, columns=list(columns) if columns else None).to_pylist()
        skip = max(first_row - row, 0)
        for number, record in enumerate(records[skip:], start=row + skip + 1):
            yield number, record, size * (group + 1) // groups
        row += group_rows


def refuse_repeated_columns(path: Path, columns: Sequence[str]) -> None:
    """One line for a header that names a column twice: which of the two a run read would be a silent guess."""
    seen: set[str] = set()
    for column in columns:
        if column.strip() and column in seen:
            raise MiaFastError(f"{path}: the column {shown(column)} is named twice in the header; rename one")
        seen.add(column)


def parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.ParquetFile(path).schema_arrow.names)


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
