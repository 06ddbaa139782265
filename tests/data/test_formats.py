"""Output formats: each built-in format's rows written and read back alike, a format that says where its rows start
(so that a shard of a --ray run seeks there) and one that does not (positioned by row number), both registered here,
and parquet's conversion from its stage, which gives a column one type from every value, text where none holds
them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mia_fast.data import DataStream, read_dataset
from mia_fast.data.files import read_rows, row_positions
from mia_fast.data.formats import (
    OUTPUT_FORMATS,
    ColumnKinds,
    OutputFormat,
    as_text_value,
    output_format,
    register_format,
)
from mia_fast.data.outputs import ResultWriter
from mia_fast.data.readers import RowPosition
from mia_fast.errors import MiaFastError

ROWS = [{"id": f"r{i}", "text": f"text number {i}", "label": i % 2, "score": float(i) / 3} for i in range(10)]
COLUMNS = ["id", "text", "label", "score"]


class ObjectLines(OutputFormat):
    """A toy format: one JSON object per line. With ``seeks`` it says where each row starts, and its reader seeks
    there; without, its reader reads past the rows before a position. It keeps every start it was asked to read
    from."""

    def __init__(self, suffix: str, seeks: bool) -> None:
        self.suffix, self.seeks, self.starts = suffix, seeks, []

    def encode(self, rows, columns) -> bytes:
        return "".join(json.dumps({c: row[c] for c in columns}) + "\n" for row in rows).encode()

    def read_back(self, path: Path, start: RowPosition) -> Iterator[tuple[int, dict, int]]:
        self.starts.append(start)
        with open(path, "rb") as f:
            f.seek(start.offset or 0)
            first = start.number if start.offset is not None else 1
            for number, line in enumerate(f, start=first):
                if start.offset is not None or number - 1 >= start.row:
                    yield number, json.loads(line), f.tell()

    def row_starts(self, path: Path) -> Iterator[RowPosition] | None:
        return self._starts(path) if self.seeks else None

    def _starts(self, path: Path) -> Iterator[RowPosition]:
        offset = 0
        with open(path, "rb") as f:
            for row, line in enumerate(f):
                yield RowPosition(row, row + 1, offset)
                offset += len(line)


@pytest.fixture(params=[True, False], ids=["seeks", "by-row-number"])
def toy(request):
    fmt = register_format(ObjectLines(".seeks" if request.param else ".rows", request.param))
    yield fmt
    del OUTPUT_FORMATS[fmt.suffix]


def test_a_format_says_whether_a_shard_seeks_to_its_rows_or_counts_them(toy, tmp_path):
    path = tmp_path / f"d{toy.suffix}"
    path.write_bytes(toy.encode(ROWS, COLUMNS))
    positions, rows = row_positions(path, 3)
    assert rows == 10 and [p.row for p in positions] == [0, 3, 6, 9]
    line_starts = [len(toy.encode(ROWS[:row], COLUMNS)) for row in (0, 3, 6, 9)]
    assert [p.offset for p in positions] == (line_starts if toy.seeks else [None] * 4)
    whole = read_dataset(path)
    toy.starts.clear()
    for position in positions:
        shard = DataStream(path).part(position, 3)
        assert [t for block, _ in shard.blocks(2) for t in block.texts] == whole.texts[position.row : position.row + 3]
    assert toy.starts == positions  # each shard's reader was given the position as the format declared it


def test_the_built_in_formats_seek_where_the_file_allows(tmp_path):
    assert output_format(Path("o.jsonl")).row_starts(tmp_path / "o.jsonl.gz") is None  # gzip cannot seek
    assert output_format(Path("o.parquet")).row_starts(tmp_path / "o.parquet") is None  # row groups are skipped
    csv = tmp_path / "d.csv"
    csv.write_text('id,text\na,"two\nlines"\n\nb,one\n')
    assert list(output_format(csv).row_starts(csv)) == [RowPosition(0, 2, 8), RowPosition(1, 3, 23)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_rows_written_by_a_format_read_back_as_written(tmp_path, suffix):
    out = tmp_path / f"o{suffix}"
    writer = ResultWriter(out, COLUMNS)
    writer.write(ROWS[:4])
    writer.write(ROWS[4:] + [{"id": "nan", "text": "x", "label": 0, "score": float("nan")}])
    writer.close()
    records = [record for _, record, _ in output_format(out).read_back(out, RowPosition(0, 0))]
    expected = [{c: str(row[c]) for c in COLUMNS} for row in ROWS] if suffix == ".csv" else ROWS
    assert records[:10] == expected
    assert records[10]["score"] in (None, "")  # NaN is each format's missing value
    assert [r["id"] for _, r, _ in output_format(out).read_back(out, RowPosition(7, 8))] == ["r7", "r8", "r9", "nan"]


def test_an_output_suffix_no_format_is_registered_for_is_refused():
    with pytest.raises(MiaFastError, match=r"o.xlsx: unsupported output format; use one of .jsonl, .csv, .parquet"):
        output_format(Path("o.xlsx"))


def test_parquet_output_columns_empty_at_first_take_their_later_type(tmp_path, monkeypatch):
    monkeypatch.setattr("mia_fast.data.formats.PARQUET_CONVERSION_ROWS", 3)
    writer = ResultWriter(tmp_path / "o.parquet", ["id", "score", "warning"])
    writer.write([{"id": i, "score": float(i), "warning": None} for i in range(5)])
    writer.write([{"id": 5, "score": float("nan"), "warning": "nothing to score"}])
    writer.close()
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.schema.field("warning").type == pa.string()
    assert table.column("warning").to_pylist() == [None] * 5 + ["nothing to score"]
    assert table.column("score").to_pylist()[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_column_gets_one_type_from_every_value_and_text_where_none_holds_them():
    def kinds_of(values):
        kinds = ColumnKinds()
        for number, value in enumerate(values, start=1):
            kinds.add(value, number)
        return kinds

    assert [kinds_of(v).type for v in ([1, None, 2**63 - 1], [0.5], ["a"], [True], [None])] == [
        "int64",
        "float64",
        "string",
        "bool_",
        "null",
    ]
    for mixed in ([1, "1"], [1, 2.5], [True, 1], [{"a": 1}], [[1]], [2**63]):
        assert kinds_of(mixed).type is None, mixed
    assert kinds_of([1, 2.5]).numbers and not kinds_of([1, "a"]).numbers
    line = kinds_of([None, 1, "1", 2, 2.5]).text_warning("d.jsonl", "id", "line")
    assert line == (
        "d.jsonl: no one type holds every 'id' (an int at line 2, a string at line 3, a float at line 5): the 'id' "
        'column is written as text (2.5 as "2.5", an object as its JSON)'
    )
    assert kinds_of([1, 2]).text_warning("d.jsonl", "id", "line") is None
    assert [as_text_value(v) for v in (1, "1", 2.5, None, True, {"a": 1}, 2**64)] == [
        "1",
        "1",
        "2.5",
        None,
        "true",
        '{"a": 1}',
        "18446744073709551616",
    ]


def test_parquet_conversion_never_fails_on_the_values_it_is_given(tmp_path, monkeypatch):
    """Rows a writer was given without text columns (a --ray merge of shards typed apart): ints in the first chunk
    and strings after, ints and floats in a score column, nothing but nulls."""
    monkeypatch.setattr("mia_fast.data.formats.PARQUET_CONVERSION_ROWS", 2)
    writer = ResultWriter(tmp_path / "o.parquet", ["id", "score", "warning"])
    writer.write([{"id": 1, "score": 1, "warning": None}, {"id": 2, "score": 0.5, "warning": None}])
    writer.write([{"id": "three", "score": None, "warning": None}])
    writer.close()
    table = pq.read_table(tmp_path / "o.parquet")
    assert [table.schema.field(c).type for c in table.column_names] == [pa.string(), pa.float64(), pa.null()]
    assert table.column("id").to_pylist() == ["1", "2", "three"]
    assert table.column("score").to_pylist() == [1.0, 0.5, None]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_text_column_is_text_in_every_format(tmp_path, suffix):
    out = tmp_path / f"o{suffix}"
    writer = ResultWriter(out, ["id", "label"], text_columns=["id"])
    writer.write([{"id": 1, "label": 0}, {"id": 2.5, "label": 1}, {"id": None, "label": 0}])
    writer.close()
    ids = [record["id"] for _, record in read_rows(out)]
    assert ids == ["1", "2.5", "" if suffix == ".csv" else None]
