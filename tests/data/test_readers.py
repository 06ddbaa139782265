"""Reading each format, streamed: lines with their numbers and byte positions (a byte-order mark dropped), JSON lines
and csv rows from a byte offset as from the start, each row's start, JSON arrays, parquet from a row, and small files
read whole with one line for each way they can be wrong."""

import gzip
import itertools
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mia_fast.data.readers import (
    ZSTD,
    BadRecord,
    RowPosition,
    csv_records,
    csv_row_starts,
    decode_json_record,
    iter_lines,
    iter_parquet,
    json_array_records,
    jsonl_records,
    jsonl_row_starts,
    read_small_file,
    refuse_repeated_columns,
    repeated_field,
)
from mia_fast.errors import MiaFastError


def test_lines_come_with_their_number_and_the_bytes_read(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"\xef\xbb\xbffirst\nsecond\nthird")
    assert list(iter_lines(path)) == [(1, b"first\n", 9), (2, b"second\n", 16), (3, b"third", 21)]
    assert list(iter_lines(path, offset=9, first_line=2)) == [(2, b"second\n", 16), (3, b"third", 21)]
    for name, pack in (("a.txt.gz", gzip.compress), ("b.TXT.GZ", gzip.compress), ("c.zst", ZSTD.compress)) + (
        ("d.jsonl.zstd", ZSTD.compress),
        ("e.Zstd", ZSTD.compress),
    ):
        packed = tmp_path / name
        packed.write_bytes(pack(b"one\ntwo\n"))
        assert [line for _, line, _ in iter_lines(packed)] == [b"one\n", b"two\n"], name
    with pytest.raises(ValueError, match="read from its start"):
        list(iter_lines(packed, offset=3))


@pytest.mark.parametrize(
    "line, kind",
    [(b'{"a": 1', "json"), (b"\xff{}", "utf8"), (b"[1, 2]", "type"), (b'"text"', "type")]
    + [(b'{"a": "\xed\xa0\x80"}', "utf8"), (b'{"a": "\xed\xbf\xbf\xf0\x9f\x98\x80"}', "utf8")],
)
def test_a_line_that_is_no_json_object_says_why(line, kind):
    """Raw bytes of a surrogate (ED A0 80) are no UTF-8, though json alone reads them as a lone surrogate."""
    with pytest.raises(BadRecord) as caught:
        decode_json_record(line)
    assert caught.value.kind == kind
    assert decode_json_record(b'{"a": [1]}\n') == {"a": [1]}


def test_what_json_reads_of_a_line_is_still_read():
    assert decode_json_record(b'{"a": "\\ud800 \\ud83d\\ude00"}\n') == {"a": "\ud800 \U0001f600"}  # escapes
    assert math.isnan(decode_json_record(b'{"a": NaN}')["a"])
    assert decode_json_record(b'\xef\xbb\xbf{"a": "caf\xc3\xa9"}') == {"a": "caf\u00e9"}  # a byte-order mark
    twice = decode_json_record(b'{"a": 1, "b": {"c": 1, "c": 2}, "a": 3}')
    assert twice == {"a": 3, "b": {"c": 2}} and repeated_field(twice, ("b", "a")) == "a"


def test_json_lines_from_each_row_start_equal_the_whole_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"i": 0}\n\n{"i": 1}\n   \n{"i": 2}\n')
    whole = list(jsonl_records(path, RowPosition(0, 0)))
    assert [(number, record["i"]) for number, record, _ in whole] == [(1, 0), (3, 1), (5, 2)]
    starts = list(jsonl_row_starts(path))
    assert starts == [RowPosition(0, 1, 0), RowPosition(1, 3, 10), RowPosition(2, 5, 23)]
    for start in starts:
        assert list(jsonl_records(path, start)) == whole[start.row :]
        assert list(jsonl_records(path, RowPosition(start.row, start.number))) == whole[start.row :]  # read past
    path.write_text('{"i": 0}\n{"i": \n')
    with pytest.raises(MiaFastError, match=r"d.jsonl:2: malformed JSON: Expecting value"):
        list(jsonl_records(path, RowPosition(0, 0)))


def test_csv_rows_span_lines_and_are_numbered_as_a_spreadsheet_does(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text('id,text\n1,"two\nlines"\n\n2,plain\n3,last\n')
    whole = list(csv_records(path, RowPosition(0, 0)))
    assert [(number, record) for number, record, _ in whole] == [
        (2, {"id": "1", "text": "two\nlines"}),
        (3, {"id": "2", "text": "plain"}),
        (4, {"id": "3", "text": "last"}),
    ]
    assert [position for _, _, position in whole] == sorted(position for _, _, position in whole)
    starts = list(csv_row_starts(path))
    assert [(s.row, s.number) for s in starts] == [(0, 2), (1, 3), (2, 4)]
    for start in starts:
        assert [r for _, r, _ in csv_records(path, start)] == [r for _, r, _ in whole[start.row :]]
    (tmp_path / "empty.csv").write_text("")
    assert list(csv_records(tmp_path / "empty.csv", RowPosition(0, 0))) == []
    (tmp_path / "twice.csv").write_text("id,text,id\n1,a,2\n")
    with pytest.raises(MiaFastError, match="the column 'id' is named twice in the header; rename one"):
        list(csv_records(tmp_path / "twice.csv", RowPosition(0, 0)))


def test_a_json_array_is_read_whole_and_from_a_row(tmp_path):
    path = tmp_path / "d.json.gz"
    path.write_bytes(gzip.compress(("\ufeff" + json.dumps([{"i": 0}, {"i": 1}, {"i": 2}])).encode()))
    size = path.stat().st_size
    assert list(json_array_records(path, RowPosition(1, 2))) == [(2, {"i": 1}, size), (3, {"i": 2}, size)]
    bad = tmp_path / "bad.json"
    bad.write_text('[{"i": 0}, 3]')
    with pytest.raises(MiaFastError, match="bad.json: expected a JSON array of objects"):
        list(json_array_records(bad, RowPosition(0, 0)))
    bad.write_text('[{"i": 0},\n{"i": }]')
    with pytest.raises(MiaFastError, match="bad.json:2: malformed JSON"):
        list(json_array_records(bad, RowPosition(0, 0)))


def test_parquet_is_read_from_a_row_skipping_earlier_row_groups(tmp_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"i": list(range(10)), "t": [str(i) for i in range(10)]}), path, row_group_size=3)
    records = list(iter_parquet(path, ["i"], first_row=4))
    assert [(number, record) for number, record, _ in records] == [(n + 1, {"i": n}) for n in range(4, 10)]
    assert records[-1][2] == path.stat().st_size


def test_a_parquet_string_that_is_not_utf8_is_refused_naming_its_row_and_column(tmp_path):
    path = tmp_path / "d.parquet"
    texts = pa.array([b"a", b"b", b"c", b"\xed\xa0\x80", b"e"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"i": list(range(5)), "text": texts}), path, row_group_size=3)
    assert [record["text"] for _, record, _ in itertools.islice(iter_parquet(path), 3)] == ["a", "b", "c"]
    with pytest.raises(MiaFastError, match=r"d.parquet: row 4: 'text' is not valid UTF-8 \(byte 0\)$"):
        list(iter_parquet(path))


def test_a_header_may_not_name_a_column_twice():
    refuse_repeated_columns("f.csv", ["a", "b", "", " ", ""])  # blank names are not names
    with pytest.raises(MiaFastError, match="the column 'a' is named twice"):
        refuse_repeated_columns("f.csv", ["a", "b", "a"])


def test_a_small_file_is_read_whole_or_refused_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "run.toml"
    path.write_bytes(b"x" * 10)
    assert read_small_file(str(path), 10, "a run file") == b"x" * 10
    with pytest.raises(MiaFastError, match="run.toml is over 9 bytes: too large for a run file"):
        read_small_file(str(path), 9, "a run file")
    with pytest.raises(MiaFastError, match="missing.toml: no such file"):
        read_small_file(str(tmp_path / "missing.toml"), 10, "a run file")
    (tmp_path / "dangling.toml").symlink_to(tmp_path / "nowhere")
    with pytest.raises(MiaFastError, match="dangling.toml: a link to nothing"):
        read_small_file(str(tmp_path / "dangling.toml"), 10, "a run file")
    (tmp_path / "loop.toml").symlink_to(tmp_path / "loop.toml")
    with pytest.raises(MiaFastError, match="loop.toml: a loop of links"):
        read_small_file(str(tmp_path / "loop.toml"), 10, "a run file")
    with pytest.raises(MiaFastError, match="is a directory, not a run file"):
        read_small_file(str(tmp_path), 10, "a run file")
