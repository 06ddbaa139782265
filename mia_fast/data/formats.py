"""Output formats: how score rows are written to a file and read back, one small class each.

A format turns blocks of rows into bytes a :class:`~mia_fast.data.outputs.ResultWriter` appends to its stage, and
reads a finished file back as records (for ``mia-fast eval``, or as an input; the reading itself is in
:mod:`mia_fast.data.readers`). A format that can seek to a row says where each row starts (``row_starts``), so that a
shard of a --ray run reads from there; one that cannot is positioned by row number. A format that cannot be appended
to a block at a time (parquet) is staged in another (``staged_in``) and converted by :meth:`OutputFormat.finish`
once the output is complete; such an output cannot be extended by a later ``--resume``.

Adding a format is one class and one :func:`register_format` line: ``--out`` accepts its suffix, the stage and the
manifest work as for the others, and the scores file reads back (docs/adding-an-output-format.md).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mia_fast.data.readers import (
    Records,
    RowPosition,
    csv_records,
    csv_row_starts,
    iter_parquet,
    jsonl_records,
    jsonl_row_starts,
)
from mia_fast.errors import MiaFastError

# Rows of a staged .parquet output converted at a time, so that memory stays flat whatever the output's size.
PARQUET_CONVERSION_ROWS = 8192

Rows = Sequence[Mapping[str, Any]]


class OutputFormat:
    """A file format of score rows, registered under its ``suffix``.

    ``encode`` writes blocks of rows after the ``header``; ``read_back`` reads a finished file, and ``row_starts``
    says where each of its rows starts where the format can seek to one. A format with ``staged_in`` set is written
    in that format while the run lasts and turned into its own by ``finish``. ``read_suffixes`` are the file names
    it reads as an input (e.g. compressed ones as well).
    """

    suffix: str = ""
    staged_in: OutputFormat | None = None

    @property
    def name(self) -> str:
        return self.suffix.lstrip(".")

    @property
    def read_suffixes(self) -> tuple[str, ...]:
        return (self.suffix,)

    @property
    def stage(self) -> OutputFormat:
        """The format the rows are appended in while the output is unfinished."""
        return self.staged_in or self

    def header(self, columns: Sequence[str]) -> bytes:
        """What the file starts with before any row."""
        return b""

    def encode(self, rows: Rows, columns: Sequence[str]) -> bytes:
        """One block of rows, ``columns`` in order; NaN and None are the format's missing value. A format staged in
        another needs none."""
        raise NotImplementedError

    def finish(self, staged: Path, target: Path, columns: Sequence[str]) -> None:
        """Converts the complete staged rows (in ``staged_in``) into ``target`` in this format; only a format staged
        in another needs one."""
        raise NotImplementedError

    def read_back(self, path: Path, start: RowPosition) -> Records:
        """(line or row number, record, bytes of the file read so far) of every record from ``start`` on: from its
        byte ``offset`` where ``start`` has one (a position ``row_starts`` gave), else by reading past ``start.row``
        records."""
        raise NotImplementedError

    def row_starts(self, path: Path) -> Iterator[RowPosition] | None:
        """The position of each row of ``path`` with the byte offset where it starts, which ``read_back`` seeks to;
        None (the default) where the file's rows cannot be sought, so that they are positioned by row number and read
        past."""
        return None


def json_value(value: Any) -> Any:
    """A value as JSON holds it: NaN, which JSON lacks, is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class JsonLines(OutputFormat):
    suffix = ".jsonl"

    @property
    def read_suffixes(self) -> tuple[str, ...]:
        return (".jsonl", ".jsonl.gz")

    def encode(self, rows: Rows, columns: Sequence[str]) -> bytes:
        return "".join(
            json.dumps({c: json_value(row[c]) for c in columns}, ensure_ascii=False) + "\n" for row in rows
        ).encode("utf-8")

    def read_back(self, path: Path, start: RowPosition) -> Records:
        return jsonl_records(path, start)

    def row_starts(self, path: Path) -> Iterator[RowPosition] | None:
        return None if path.name.lower().endswith(".gz") else jsonl_row_starts(path)


JSONL = JsonLines()


class Csv(OutputFormat):
    suffix = ".csv"

    def header(self, columns: Sequence[str]) -> bytes:
        buffer = io.StringIO(newline="")
        csv.writer(buffer).writerow(columns)
        return buffer.getvalue().encode("utf-8")

    def encode(self, rows: Rows, columns: Sequence[str]) -> bytes:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        for row in rows:
            writer.writerow(["" if json_value(row[c]) is None else row[c] for c in columns])
        return buffer.getvalue().encode("utf-8")

    def read_back(self, path: Path, start: RowPosition) -> Records:
        return csv_records(path, start)

    def row_starts(self, path: Path) -> Iterator[RowPosition] | None:
        return csv_row_starts(path)


class Parquet(OutputFormat):
    suffix = ".parquet"
    staged_in = JSONL

    def read_back(self, path: Path, start: RowPosition) -> Records:
        return iter_parquet(path, first_row=start.row)

    def finish(self, staged: Path, target: Path, columns: Sequence[str]) -> None:
        import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)
        import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

        # Two passes over the staged rows, a few thousand at a time: one for the column types (a column that is
        # empty in the first rows and text later is text), one to write.
        schemas = [table.schema for table in self._staged_tables(staged)]
        schema = (
            pa.unify_schemas(schemas, promote_options="permissive")
            if schemas
            else pa.table({c: [] for c in columns}).schema
        )
        with pq.ParquetWriter(target, schema) as parquet:
            for table in self._staged_tables(staged):
                parquet.write_table(table.select(schema.names).cast(schema))

    def _staged_tables(self, staged: Path) -> Iterator[Any]:
        import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

        records: list[dict[str, Any]] = []
        for _, record, _ in self.stage.read_back(staged, RowPosition(0, 0)):
            records.append(record)
            if len(records) == PARQUET_CONVERSION_ROWS:
                yield pa.Table.from_pylist(records)
                records = []
        if records:
            yield pa.Table.from_pylist(records)


OUTPUT_FORMATS: dict[str, OutputFormat] = {}


def register_format(fmt: OutputFormat) -> OutputFormat:
    """Makes ``fmt`` an output format (``--out`` with its suffix) and a format data files are read in."""
    OUTPUT_FORMATS[fmt.suffix] = fmt
    return fmt


register_format(JSONL)
register_format(Csv())
register_format(Parquet())


def output_suffixes() -> tuple[str, ...]:
    return tuple(OUTPUT_FORMATS)


def matching_suffix(path: Path, allowed: Sequence[str], what: str) -> str:
    """The longest of ``allowed`` that ``path``'s name ends with (any case); one line naming them where none does."""
    name = path.name.lower()
    for suffix in sorted(allowed, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    raise MiaFastError(f"{path}: unsupported {what} format; use one of {', '.join(allowed)}")


def output_format(path: Path) -> OutputFormat:
    """The registered format of an output, by its suffix."""
    return OUTPUT_FORMATS[matching_suffix(path, tuple(OUTPUT_FORMATS), "output")]
