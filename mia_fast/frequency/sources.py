"""What a frequency table records of each file it counted, and the merge of those records: a source two tables
share would have its documents counted twice, so a merge names it, or, where the user allows it, says so in the
merged table's header.

A source is the same as another when its recorded path is equal, or its size and content sample are: a sha256 over
the size and the file's first and last MiB (the whole file up to 2 MiB), read in a few milliseconds however large the
file, and equal for a copy under another path. Tables written before sources had sizes (format versions 1 and 2)
record paths only, and are compared by path.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mia_fast.errors import MiaFastError

SAMPLE_BYTES = 1 << 20
_RECORD_FIELDS = {"path": str, "bytes": (int, type(None)), "sample_sha256": (str, type(None)), "counted": int}


@dataclass(frozen=True)
class TableSource:
    """A counted file: its path as the build named it and, where recorded, its size, content sample and how many
    times its documents are in the table's counts (more than once only in a merge that allowed overlaps)."""

    path: str
    size: int | None = None
    sample_sha256: str | None = None
    counted: int = 1

    @classmethod
    def of(cls, path: str | os.PathLike, name: str | None = None) -> TableSource:
        """The record of the file at ``path`` as it is now, named ``name`` (default: the path)."""
        path = Path(path)
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            digest.update(size.to_bytes(8, "little"))
            digest.update(f.read(2 * SAMPLE_BYTES if size <= 2 * SAMPLE_BYTES else SAMPLE_BYTES))
            if size > 2 * SAMPLE_BYTES:
                f.seek(size - SAMPLE_BYTES)
                digest.update(f.read(SAMPLE_BYTES))
        return cls(name or str(path), size, digest.hexdigest())

    @classmethod
    def from_record(cls, record: Any) -> TableSource:
        """A header's record: a path alone (format versions 1 and 2) or an object of :meth:`record`'s fields."""
        if isinstance(record, str):
            return cls(record)
        if not isinstance(record, dict) or set(record) != set(_RECORD_FIELDS):
            raise MiaFastError(f"a source must be an object of the fields {', '.join(_RECORD_FIELDS)}")
        for key, kind in _RECORD_FIELDS.items():
            if not isinstance(record[key], kind) or isinstance(record[key], bool):
                raise MiaFastError(f"a source's {key!r} has the wrong type ({type(record[key]).__name__})")
        if record["counted"] < 1 or (record["bytes"] is not None and record["bytes"] < 0):
            raise MiaFastError("a source's 'counted' must be positive and its 'bytes' not negative")
        return cls(record["path"], record["bytes"], record["sample_sha256"], record["counted"])

    def record(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.size, "sample_sha256": self.sample_sha256, "counted": self.counted}

    @property
    def content(self) -> tuple[int, str] | None:
        """What identifies the file's content; None where unrecorded, or for an empty file, which holds no document."""
        return None if not self.size or self.sample_sha256 is None else (self.size, self.sample_sha256)

    def describe(self) -> str:
        times = {1: "", 2: " (counted twice)"}.get(self.counted, f" (counted {self.counted} times)")
        return self.path + times


def merged_sources(
    sources: Sequence[Sequence[TableSource]], names: Sequence[str], *, allow_overlap: bool = False
) -> tuple[TableSource, ...]:
    """The sources of tables merged, each listed once: a source of two tables (see the module's docstring) is
    refused naming both tables, or, with ``allow_overlap``, kept once with the times its documents are counted
    added up. A source listed twice inside one table (a merge of an older mia-fast) is listed once."""
    merged: list[TableSource] = []
    owners: list[int] = []  # the table each merged source first came from
    by_path: dict[str, int] = {}
    by_content: dict[tuple[int, str], int] = {}
    for table, own in enumerate(sources):
        for source in own:
            index, how = by_path.get(source.path), "the same path"
            if index is None and source.content is not None:
                index, how = by_content.get(source.content), "the same size and the same first and last MiB"
            if index is None:
                index = len(merged)
                merged.append(source)
                owners.append(table)
            else:
                if owners[index] != table and not allow_overlap:
                    raise MiaFastError(_overlap(merged[index], names[owners[index]], source, names[table], how))
                kept = merged[index]
                merged[index] = replace(
                    kept if kept.content or not source.content else source, counted=kept.counted + source.counted
                )
            by_path.setdefault(source.path, index)
            if source.content is not None:
                by_content.setdefault(source.content, index)
    return tuple(merged)


def _overlap(first: TableSource, first_table: str, second: TableSource, second_table: str, how: str) -> str:
    if first.path == second.path:
        shared = f"both count {first.path} ({how})"
    else:
        shared = f"{first_table} counts {first.path} and {second_table} {second.path}, the same file ({how})"
    return (
        f"cannot merge {first_table} and {second_table}: {shared}, whose documents would be counted twice; "
        "pass --allow-overlap (allow_overlap=True) to merge them anyway"
    )
