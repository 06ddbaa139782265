"""Pieces of a corpus file: every line read by exactly one piece, in order, whatever the piece and block sizes and
wherever lines end; and a block of JSON lines parsed at once gives what ``json`` gives line by line, or is read line
by line."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.frequency import pieces
from mia_fast.frequency.corpus import BadRecords, iter_documents
from mia_fast.frequency.pieces import piece_documents, plan_pieces

pytestmark = pytest.mark.lower_bounds

line_text = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(line_text, max_size=40),
    piece_bytes=st.integers(1, 200),
    block_bytes=st.integers(1, 100),
    ending=st.sampled_from(["\n", "\r\n"]),
    last_newline=st.booleans(),
    bom=st.booleans(),
)
def test_pieces_read_every_line_once_in_order(
    tmp_path_factory, texts, piece_bytes, block_bytes, ending, last_newline, bom
):
    """Pieces and blocks of any size read the documents that the line-by-line reader reads, in order."""
    path = tmp_path_factory.mktemp("p") / "c.txt"
    body = ending.join(texts) + (ending if last_newline and texts else "")
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + body.encode())
    expected = [text for text, _ in iter_documents(path, "text", BadRecords())]
    planned = plan_pieces(0, path, piece_bytes)
    assert sum(piece.size for piece in planned) == path.stat().st_size
    pieces.BLOCK_BYTES, saved = block_bytes, pieces.BLOCK_BYTES
    try:
        read = [text for piece in planned for block in piece_documents(piece, "text", BadRecords()) for text in block]
    finally:
        pieces.BLOCK_BYTES = saved
    assert read == expected


json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
raw_line = st.one_of(
    st.builds(
        lambda record: json.dumps(record, ensure_ascii=False),
        st.dictionaries(st.sampled_from(["text", "t", "x"]), json_value, max_size=3),
    ),
    st.builds(lambda text: json.dumps({"text": text}), st.text(max_size=10)),  # lone surrogates escaped, too
    st.sampled_from(
        [
            "",
            "  ",
            "\t",
            '{"text": NaN}',
            '{"text": "a"} {"text": "b"}',
            '{"text": "a"},{"text": "b"}',
            "[1, 2]",
            '{"text": "\\ud800"}',
            '\ufeff{"text": "bom"}',
            "\x0c",
            '{"text": 1e400, "u": 2}',
        ]
    ),
    st.text(max_size=12),
)


# Lines as JSON writers write them by default, every other character escaped: a block of them is decoded to its texts
# alone, the other fields skipped, so the odd values sit beside the text.
ascii_line = st.one_of(
    st.builds(json.dumps, st.dictionaries(st.sampled_from(["text", "t", "x"]), json_value, max_size=3)),
    st.sampled_from(
        [
            '{"x": NaN, "text": "a"}',
            '{"x": "\\ud800", "text": "a"}',
            '{"x": 01, "text": "a"}',
            '{"x": [1,], "text": "a"}',
            '{"x": "\\q", "text": "a"}',
            '{"text": "a", "text": 1}',
            '{"text": 1, "text": "b"}',
            '{"text": "a", "text": "b"}',
            '{"text": "a", "x": 1e400}',
            '{"text": null}',
            '{"text": "a"} {"text": "b"}',
            "{}",
        ]
    ),
)


# Records that run over two lines, and lines of two records, which a reader of the block as one stream must not pair
# up into as many records as lines.
multiline = st.sampled_from(
    ['{"text": "a",\n"x": 1}', '{"text": {"y": 1}\n}', '{"text": [\n1]}', '{"t": 1}\n{"text": "b"}']
)


@settings(max_examples=600, deadline=None)
@given(
    lines=st.lists(raw_line | multiline, max_size=12) | st.lists(ascii_line | multiline, max_size=12),
    invalid_utf8=st.booleans(),
)
def test_a_block_parsed_at_once_reads_what_json_reads_line_by_line(tmp_path_factory, lines, invalid_utf8):
    """msgspec on a whole block, and line by line where it refuses: the same documents, bad records and lone
    surrogates as ``json`` line by line (the reader every earlier build used)."""
    path = tmp_path_factory.mktemp("j") / "c.jsonl"
    data = "\n".join(line if line.startswith("{") else line.replace("\n", " ") for line in lines)
    data = data.encode("utf-8", "surrogatepass")
    if invalid_utf8 and data:
        data = data[: len(data) // 2] + b"\xff" + data[len(data) // 2 :]
    path.write_bytes(data)
    expected_bad, read_bad = BadRecords(skip=True), BadRecords(skip=True)
    expected = [text for text, _ in iter_documents(path, "text", expected_bad)]
    blocks = [block for piece in plan_pieces(0, path) for block in piece_documents(piece, "text", read_bad)]
    read = [text for block in blocks for text in block]
    assert read == expected
    assert (read_bad.count, read_bad.examples, read_bad.surrogate_documents) == (
        expected_bad.count,
        expected_bad.examples,
        expected_bad.surrogate_documents,
    )


def test_parquet_pieces_cut_between_row_groups(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    texts = [f"document {i}" for i in range(50)]
    pq.write_table(pa.table({"text": texts, "n": list(range(50))}), path, row_group_size=7)
    planned = plan_pieces(0, path, piece_bytes=1)
    assert len(planned) == 8 and sum(p.size for p in planned) == path.stat().st_size
    read = [text for piece in planned for block in piece_documents(piece, "text", BadRecords()) for text in block]
    assert read == texts


def test_a_missing_parquet_column_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"content": ["a"]}), path)
    with pytest.raises(Exception, match=r"no column 'text' \(columns: content\)"):
        list(piece_documents(plan_pieces(0, path)[0], "text", BadRecords()))


def test_two_records_on_a_line_and_one_over_two_lines_are_bad_records_not_three_documents(tmp_path):
    """As many values as lines, yet no line one object: a stream reader would count three documents; the build, as
    json line by line, three bad lines."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a"} {"text": "b"}\n{"text": "c", "x": [1,\n2]}\n{"text": "d"}\n')
    bad = BadRecords(skip=True)
    read = [text for piece in plan_pieces(0, path) for block in piece_documents(piece, "text", bad) for text in block]
    assert read == ["d"] and bad.count == 3
