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
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
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
from mia_fast.errors import MiaFastError, MiaFastWarning

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

    def finish(self, staged: Path, target: Path, columns: Sequence[str], text_columns: Collection[str] = ()) -> None:
        """Converts the complete staged rows (in ``staged_in``) into ``target`` in this format, the columns of
        ``text_columns`` as text; only a format staged in another needs one. It cannot fail on the values: a column of
        values no one type holds is text."""
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


# A value's kind, as a typed column (parquet's) holds it, by its Python type; an int is one only within 64 bits.
_KINDS = {bool: "bool_", int: "int64", float: "float64", str: "string"}
_INT64 = range(-(2**63), 2**63)


def value_kind(value: Any) -> str | None:
    """The arrow type (by its pyarrow name) one column of ``value``'s kind has; None for a missing value; the
    kind's name for one no typed column of this tool holds (an object, a list, an int beyond 64 bits)."""
    if value is None:
        return None
    kind = _KINDS.get(type(value), type(value).__name__)
    return "int beyond 64 bits" if kind == "int64" and value not in _INT64 else kind


def as_text_value(value: Any) -> str | None:
    """A value in a column written as text: a string as it is, any other as its JSON text (``2.5`` as "2.5", an
    object as its JSON), a missing one missing."""
    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class ColumnKinds:
    """The kinds of value (:func:`value_kind`) a column holds, each with the line (or row) it first occurs on, so
    that a column gets one type from every value before any is written: ``type``, or None where no one type holds
    them all (kinds mixed, or one a typed column cannot hold) and the column is written as text."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}

    def add(self, value: Any, number: int) -> None:
        kind = value_kind(value)
        if kind is not None and kind not in self.first:
            self.first[kind] = number

    @property
    def type(self) -> str | None:
        """The one arrow type of every value ("null" where there is none); None where no one type holds them all."""
        kinds = set(self.first)
        if len(kinds) > 1 or not kinds <= {*_KINDS.values()}:
            return None
        return kinds.pop() if kinds else "null"

    @property
    def numbers(self) -> bool:
        """Whether the values are ints and floats, which a float column holds (a score) but not an id."""
        return set(self.first) == {"int64", "float64"}

    def text_warning(self, source: Any, field: str, where: str) -> str | None:
        """Where the column is written as text (no one type holds it), the one line that says so, naming each kind
        where it first occurs (``where``: "line" or "row"); None where one type holds every value."""
        if self.type is not None:
            return None
        seen = ", ".join(f"{_SHOWN.get(kind, kind)} at {where} {number}" for kind, number in self.first.items())
        return (
            f"{source}: no one type holds every {field!r} ({seen}): the {field!r} column is written as text "
            '(2.5 as "2.5", an object as its JSON)'
        )

    def text_columns(self, source: Any, field: str, where: str) -> tuple[str, ...]:
        """``(field,)`` where the column is written as text, said in one warning line (:meth:`text_warning`)."""
        warning = self.text_warning(source, field, where)
        if warning is None:
            return ()
        warnings.warn(MiaFastWarning(warning), stacklevel=3)
        return (field,)


_SHOWN = {
    "bool_": "a boolean",
    "int64": "an int",
    "float64": "a float",
    "string": "a string",
    "dict": "an object",
    "list": "a list",
    "int beyond 64 bits": "an int beyond 64 bits",
}


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

    def finish(self, staged: Path, target: Path, columns: Sequence[str], text_columns: Collection[str] = ()) -> None:
        import pyarrow as pa  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)
        import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow: 0.3 s at start-up; only parquet needs it)

        # Two passes over the staged rows, a few thousand at a time: one for the kinds of value in each column (a
        # column that is empty in the first rows and text later is text), one to write them in the type they make.
        kinds = {column: ColumnKinds() for column in columns}
        for number, record, _ in self.stage.read_back(staged, RowPosition(0, 0)):
            for column, seen in kinds.items():
                seen.add(record.get(column), number)
        as_text = {c for c in columns if c in text_columns or (kinds[c].type is None and not kinds[c].numbers)}
        schema = pa.schema(
            [(c, pa.string() if c in as_text else getattr(pa, kinds[c].type or "float64")()) for c in columns]
        )
        with pq.ParquetWriter(target, schema) as parquet:
            for records in self._staged_records(staged):
                typed = [{c: as_text_value(r.get(c)) if c in as_text else r.get(c) for c in columns} for r in records]
                parquet.write_table(pa.Table.from_pylist(typed, schema=schema))

    def _staged_records(self, staged: Path) -> Iterator[list[dict[str, Any]]]:
        records: list[dict[str, Any]] = []
        for _, record, _ in self.stage.read_back(staged, RowPosition(0, 0)):
            records.append(record)
            if len(records) == PARQUET_CONVERSION_ROWS:
                yield records
                records = []
        if records:
            yield records


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
