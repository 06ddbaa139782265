"""Streaming readers for line-oriented and parquet files, shared by datasets and reference corpora.

They yield records with their line (or row) number and how far into the file the reader is, so
callers can report ``file:line`` and drive a progress bar. Whether a bad record stops the read or
is skipped is the caller's policy: :func:`decode_json_record` raises :class:`BadRecord`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterator, Sequence


class BadRecord(ValueError):
    """A line that is not a JSON object: ``kind`` is ``utf8``, ``json`` or ``type``."""

    def __init__(self, kind: str, reason: str, detail: str):
        super().__init__(reason)
        self.kind = kind
        self.detail = detail


def iter_lines(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(line number, raw line, bytes of the file read so far) of a plain or gzip-compressed text file."""
    with open(path, "rb") as raw:
        lines = gzip.GzipFile(fileobj=raw) if path.name.lower().endswith(".gz") else raw
        for number, line in enumerate(lines, start=1):
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


def iter_parquet(path: Path, columns: Sequence[str] | None = None) -> Iterator[tuple[int, dict[str, Any], int]]:
    """(row number, record, approximate bytes read so far) of a parquet file, one row group in memory at a time."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    size, groups, row = path.stat().st_size, parquet.num_row_groups, 0
    for group in range(groups):
        for record in parquet.read_row_group(group, columns=list(columns) if columns else None).to_pylist():
            row += 1
            yield row, record, size * (group + 1) // groups


def parquet_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.ParquetFile(path).schema_arrow.names)
