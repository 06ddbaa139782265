"""Data files as a Dataset or a DataStream: blocks from any row position equal the whole file in every format, a
field that comes or goes mid-stream refused with its line, the fields read named by one Fields value, doubtful rows
warned of. Streamed files scored by ``score_file``: tests/scoring/test_runner.py.
"""

from __future__ import annotations

import csv
import gzip
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mia_fast.data import DataStream, Fields, read_dataset
from mia_fast.data.files import iter_rows, read_scores, read_texts, row_positions
from mia_fast.errors import MiaFastError, MiaFastWarning

WORDS = "the quick brown fox jumps over a lazy dog while rain falls on spain".split()


def make_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": f"r{i}", "text": " ".join(rng.choices(WORDS, k=rng.randint(0, 12))), "label": i % 2}
        for i in range(count)
    ]


def write_input(path, rows: list[dict]):
    """Writes rows in the format of ``path``'s suffix, with traps: blank lines in .jsonl, a quoted field across
    lines and a blank line in .csv, several row groups in .parquet."""
    name = path.name
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        lines = "".join(json.dumps(r) + "\n" + ("\n" if i % 7 == 3 else "") for i, r in enumerate(rows))
        path.write_bytes(gzip.compress(lines.encode()) if name.endswith(".gz") else lines.encode())
    elif name.endswith(".csv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["id", "text", "label"])
            writer.writeheader()
            for i, r in enumerate(rows):
                writer.writerow({**r, "text": r["text"].replace(" ", "\n", 1) if i % 5 == 2 else r["text"]})
                if i % 9 == 4:
                    f.write("\r\n")
    elif name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    else:
        path.write_text(json.dumps(rows))
    return path


FORMATS = ["jsonl", "jsonl.gz", "csv", "parquet", "json"]


@pytest.mark.parametrize("suffix", FORMATS)
def test_blocks_from_any_row_position_equal_the_whole_file(tmp_path, suffix):
    path = write_input(tmp_path / f"d.{suffix}", make_rows(40))
    whole = read_dataset(path)
    positions, total = row_positions(path, 6)
    assert total == 40 and [p.row for p in positions] == list(range(0, 40, 6))
    assert all((p.offset is not None) == (suffix in ("jsonl", "csv")) for p in positions)
    for position in positions:
        stream = DataStream(path).part(position, 6)
        blocks = [block for block, _ in stream.blocks(4)]
        assert [len(b.texts) for b in blocks] == ([4, 2] if position.row + 6 <= 40 else [4])
        expected = whole.rows(position.row, position.row + 6)
        assert sum((b.texts for b in blocks), []) == expected.texts
        assert sum((b.ids for b in blocks), []) == expected.ids
        assert sum((b.labels for b in blocks), []) == expected.labels
    numbers = [number for number, _, _ in iter_rows(path, positions[2])]
    assert numbers == [number for number, _, _ in iter_rows(path)][12:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(1, 30),
    block=st.integers(1, 9),
    every=st.integers(1, 9),
    suffix=st.sampled_from(["jsonl", "csv", "parquet"]),
)
def test_blocks_partition_the_file_whatever_the_sizes(tmp_path, rows, block, every, suffix):
    path = write_input(tmp_path / f"p{rows}-{block}-{every}.{suffix}", make_rows(rows, seed=rows))
    whole = read_dataset(path)
    texts = [
        t
        for p in row_positions(path, every)[0]
        for b, _ in DataStream(path).part(p, every).blocks(block)
        for t in b.texts
    ]
    assert texts == whole.texts
    ends = [end for _, end in DataStream(path).blocks(block)]
    assert ends == sorted(ends) and 0 < ends[-1] <= path.stat().st_size


def test_a_field_that_comes_or_goes_mid_stream_is_refused_with_its_line(tmp_path):
    rows = make_rows(10)
    del rows[7]["id"]
    path = write_input(tmp_path / "d.jsonl", rows)
    blocks = DataStream(path).blocks(3)
    assert len(next(blocks)[0].texts) == 3
    next(blocks)
    with pytest.raises(MiaFastError, match=r"line 9 has no 'id' field while other rows do"):
        next(blocks)
    rows = [{k: v for k, v in r.items() if k != "id" or i >= 8} for i, r in enumerate(make_rows(10))]
    path = write_input(tmp_path / "late.jsonl", rows)
    with pytest.raises(MiaFastError, match="line 10 has the 'id' field while earlier rows do not"):
        list(DataStream(path).blocks(5))


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_record_naming_a_field_it_reads_twice_is_refused_with_its_line(tmp_path, suffix):
    """json keeps a repeated field's last value; which one a user meant is a guess, so a field the run reads is
    refused, and one it does not read (nor one repeated in a nested object) is not."""
    lines = ['{"text": "a", "label": 1, "x": 1, "x": 2}', '{"text": "b", "label": 0, "m": {"k": 1, "k": 2}}']
    lines.append('{"text": "c", "label": 1, "label": 0}')
    path = tmp_path / f"d{suffix}"

    def write(lines: list[str]) -> None:
        path.write_text("\n".join(lines) if suffix == ".jsonl" else "[" + ",\n".join(lines) + "]")

    write(lines)
    assert read_dataset(path, Fields(label=None)).texts == ["a", "b", "c"]
    with pytest.raises(MiaFastError, match=rf"d\{suffix}:3: the field 'label' is named more than once in this record"):
        read_dataset(path)
    write(['{"t\\u0065xt": "a", "text": "b"}'])
    with pytest.raises(MiaFastError, match=r":1: the field 'text' is named more than once"):
        read_dataset(path)


def test_empty_inputs_and_bad_positions_are_refused(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(MiaFastError, match="holds no rows"):
        list(DataStream(tmp_path / "e.jsonl").blocks(4))
    with pytest.raises(MiaFastError, match="rows per shard must be positive"):
        row_positions(write_input(tmp_path / "d.jsonl", make_rows(3)), 0)
    with pytest.raises(MiaFastError, match="--max-words must be positive"):
        DataStream(tmp_path / "d.jsonl", max_words=0)


def test_the_fields_read_are_named_by_one_value(tmp_path):
    labels = ["nonmember", "member"]
    rows = [{"doc": f"d{i}", "body": f"text {i}", "member": labels[i % 2], "book": i // 2} for i in range(6)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fields = Fields(text="body", id="doc", label="member", group="book")
    dataset = read_dataset(path, fields, require_labels=True)
    assert dataset.texts == [r["body"] for r in rows] and dataset.ids == [r["doc"] for r in rows]
    assert dataset.labels == [0, 1, 0, 1, 0, 1] and dataset.groups == ["0", "0", "1", "1", "2", "2"]
    streamed = [block for block, _ in DataStream(path, fields, max_words=1).blocks(4)]
    assert sum((b.texts for b in streamed), []) == ["text"] * 6
    assert sum((b.labels for b in streamed), []) == dataset.labels
    only_text = read_dataset(path, Fields(text="body"))  # no "id" or "label" field under the default names
    assert only_text.ids is None and only_text.labels is None and only_text.groups is None
    with pytest.raises(MiaFastError, match="no 'label' field; evaluation needs 0/1 labels"):
        read_dataset(path, Fields(text="body"), require_labels=True)
    with pytest.raises(MiaFastError, match="no 'chapter' field for --group-field"):
        read_dataset(path, Fields(text="body", group="chapter"))


def test_repeated_ids_and_texts_labelled_both_ways_are_warned_of_once_each(tmp_path):
    rows = [{"id": "a", "text": "same", "label": 1}, {"id": "b", "text": "other", "label": 0}]
    rows += [{"id": "a", "text": "same", "label": 0}, {"id": "a", "text": "third", "label": 0}]
    path = write_input(tmp_path / "d.jsonl", rows)
    with pytest.warns(MiaFastWarning) as caught:
        assert DataStream(path).check() == 4
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "1 id occurs more than once (e.g. 'a' on lines 1 and 3)" in messages[0]
    assert "1 text is labelled both member and non-member (e.g. lines 1 and 3)" in messages[1]


def test_texts_and_score_columns_read_back(tmp_path):
    txt = tmp_path / "t.txt"
    txt.write_text("first\n\n  \nsecond\n")
    assert read_texts(txt) == ["first", "second"]
    data = write_input(tmp_path / "d.csv", [{"id": 1, "text": "x", "label": 0}, {"id": 2, "text": " ", "label": 1}])
    assert read_texts(data) == ["x"]
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(MiaFastError, match="empty.txt: holds no texts"):
        read_texts(tmp_path / "empty.txt")
    scores = tmp_path / "s.csv"
    scores.write_text("id,loss\na,-1.5\nb,\n")
    loss = read_scores(scores, ["loss"])["loss"]
    assert loss[0] == -1.5 and np.isnan(loss[1])


def test_an_input_that_is_no_regular_file_is_refused_without_opening_it(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(MiaFastError, match="pipe.jsonl is a named pipe .*write it to a file first"):
        DataStream(tmp_path / "pipe.jsonl")
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(MiaFastError, match="folder.jsonl is a directory, not a file of texts"):
        read_dataset(tmp_path / "folder.jsonl")
    with pytest.raises(MiaFastError, match=r"notes.md: unsupported input format; use one of .jsonl, .jsonl.gz"):
        read_dataset(tmp_path / "notes.md")
