"""Text corpora: the files a source names (a file, a directory, a glob), every document of each format with how far
into the file it is, bad records refused or skipped and counted, and corpora without text refused before any
tokenizer is loaded."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import train_tokenizer

from mia_fast.data.readers import ZSTD
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.frequency.corpus import (
    BAD_EXAMPLES,
    BadRecords,
    CorpusFormat,
    expand_sources,
    iter_documents,
    require_text,
)
from mia_fast.frequency.text_build import build_from_text

pytestmark = pytest.mark.lower_bounds

DOCUMENTS = ["the fox", "caf\u00e9 au lait", "", "a dog and a cat"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)


def write_documents(path, documents, field="text"):
    name = path.name.lower()
    if name.endswith(".parquet"):
        pq.write_table(pa.table({field: documents}), path, row_group_size=2)
        return path
    plain = name.removesuffix(".gz").removesuffix(".zstd").removesuffix(".zst")
    if plain.endswith(".txt"):
        data = "".join(d + "\n" for d in documents).encode()
    else:
        data = "".join(json.dumps({field: d}) + "\n" for d in documents).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else ZSTD.compress(data) if plain != name else data)
    return path


@pytest.mark.parametrize(
    "suffix",
    [".txt", ".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz", ".txt.gz", ".jsonl.zst", ".jsonl.zstd"]
    + [".TXT", ".JSONL", ".Json", ".PARQUET", ".Txt.Gz", ".JSON.ZSTD"],
)
def test_every_format_gives_its_documents_with_how_far_the_read_is(tmp_path, suffix):
    path = write_documents(tmp_path / f"c{suffix}", DOCUMENTS, field="body")
    documents = list(iter_documents(path, "body", BadRecords()))
    texts, positions = [text for text, _ in documents], [position for _, position in documents]
    # A .txt file's blank line is no document; a JSON or parquet record of empty text is one.
    assert texts == ([d for d in DOCUMENTS if d] if ".txt" in suffix.lower() else DOCUMENTS)
    assert positions == sorted(positions) and 0 < positions[-1] <= path.stat().st_size


def test_a_directory_and_a_glob_read_by_one_table_of_suffixes_and_name_what_they_skip(tmp_path):
    shards = tmp_path / "shards"
    (shards / "deeper").mkdir(parents=True)
    for name in ("b.jsonl", "c.json", "deeper/a.txt.gz", "d.jsonl.zstd", "E.JSONL"):
        write_documents(shards / name, ["the fox"])
    for name in ("notes.md", "x.pdf", "deeper/y.PDF", "README"):
        (shards / name).write_text("{}")
    (shards / "loop.jsonl").symlink_to(shards / "loop.jsonl")
    write_documents(tmp_path / "c.parquet", ["the fox"])
    with pytest.warns(MiaFastWarning) as warned:
        found = expand_sources([shards, str(tmp_path / "*.parquet")])
    assert [p.relative_to(shards).as_posix() for p in found[:-1]] == [
        "E.JSONL", "b.jsonl", "c.json", "d.jsonl.zstd", "deeper/a.txt.gz"
    ] and found[-1] == tmp_path / "c.parquet"  # fmt: skip
    assert [str(w.message) for w in warned] == [
        f"skipped 5 files in {shards} that are no corpus file: 2 .pdf, 1 .md, 1 loop of links, 1 without a suffix"
    ]
    with pytest.warns(MiaFastWarning) as warned:
        globbed = expand_sources([str(shards / "*")])
    assert [p.name for p in globbed] == ["E.JSONL", "b.jsonl", "c.json", "d.jsonl.zstd"]  # not notes.md as JSON lines
    assert [str(w.message) for w in warned] == [
        f"skipped 4 files matched by {shards}/* that are no corpus file: 1 .md, 1 .pdf, 1 loop of links, "
        "1 without a suffix"
    ]
    (shards / "deeper" / "a.txt.gz").unlink()
    with pytest.raises(MiaFastError, match=r"deeper: no corpus files \(.*\) in this directory; it holds 1 \.pdf$"):
        expand_sources([shards / "deeper"])
    with pytest.raises(MiaFastError, match="loop.jsonl: a loop of links$"):
        expand_sources([shards / "loop.jsonl"])
    with pytest.raises(MiaFastError, match=r"/\*.md: the pattern matches no corpus file; it matches 1 \.md$"):
        expand_sources([str(shards / "*.md")])
    with pytest.raises(MiaFastError, match="no corpus files given"):
        expand_sources([])


def test_bad_records_are_refused_or_counted_with_a_few_examples():
    with pytest.raises(MiaFastError, match=r"c.jsonl:3: not valid JSON \(skip such records with --skip-bad-records\)"):
        BadRecords().record("c.jsonl:3", "not valid JSON")
    bad = BadRecords(skip=True)
    for line in range(BAD_EXAMPLES + 3):
        bad.record(f"c.jsonl:{line}", "not valid JSON")
    assert bad.count == BAD_EXAMPLES + 3
    assert bad.examples == [f"c.jsonl:{line}: not valid JSON" for line in range(BAD_EXAMPLES)]


def test_a_record_naming_its_text_twice_is_a_bad_record(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a", "x": 1, "x": 2}\n{"text": "b", "text": "c"}\n{"te\\u0078t": "d", "text": "e"}\n')
    with pytest.raises(MiaFastError, match=r"c.jsonl:2: the field 'text' is named more than once"):
        list(iter_documents(path, "text", BadRecords()))
    bad = BadRecords(skip=True)
    assert [text for text, _ in iter_documents(path, "text", bad)] == ["a"] and bad.count == 2


def test_a_corpus_without_text_is_refused_reading_only_up_to_its_first_document(tmp_path):
    blank = write_documents(tmp_path / "blank.txt", ["", "  "])
    with pytest.raises(MiaFastError, match=r"the corpus \(1 file\(s\)\) holds no tokens to count"):
        require_text([blank])
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b'{"text": "the fox"}\n' + b"\xff" * 10)  # the bad line after the first document is not read
    require_text([blank, broken])
    first_bad = tmp_path / "first-bad.jsonl"
    first_bad.write_bytes(b'{"title": "no text"}\n{"text": "the dog"}\n')
    with pytest.raises(MiaFastError, match="no string field 'text'"):
        require_text([first_bad])
    require_text([first_bad], CorpusFormat(skip_bad_records=True))


def test_invalid_utf8_in_txt_and_bad_parquet_values(tokenizer, tmp_path):
    txt = tmp_path / "c.txt"
    txt.write_bytes(b"the fox\n\xff\xfe broken\nthe dog\n")
    with pytest.raises(MiaFastError, match="c.txt:2: not valid UTF-8"):
        build_from_text([txt], tokenizer)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a fox", None]}), tmp_path / "c.parquet")
    assert (
        build_from_text([tmp_path / "c.parquet"], tokenizer, corpus=CorpusFormat(skip_bad_records=True)).bad_records
        == 1
    )
    with pytest.raises(MiaFastError, match="no column 'body'"):
        build_from_text([tmp_path / "c.parquet"], tokenizer, corpus=CorpusFormat(text_field="body"))


def test_raw_invalid_utf8_in_json_lines_is_a_bad_record_an_escaped_surrogate_is_not(tokenizer, tmp_path):
    raw = tmp_path / "raw.jsonl"  # ED A0 80: the raw bytes of U+D800, which json's surrogatepass would read
    raw.write_bytes(b'{"text": "the fox"}\n{"text": "a \xed\xa0\x80 b"}\n{"text": "the dog"}\n')
    with pytest.raises(MiaFastError, match=r"raw.jsonl:2: not valid UTF-8 \(byte 12\) \(skip such records with"):
        build_from_text([raw], tokenizer)
    report = build_from_text([raw], tokenizer, corpus=CorpusFormat(skip_bad_records=True))
    assert (report.bad_records, report.table.documents, report.surrogate_documents) == (1, 2, 0)
    assert report.bad_examples == [f"{raw}:2: not valid UTF-8 (byte 12)"]
    escaped = tmp_path / "escaped.jsonl"
    escaped.write_bytes(b'{"text": "the fox"}\n{"text": "a \\ud800 b"}\n')
    report = build_from_text([escaped], tokenizer)
    assert (report.bad_records, report.table.documents, report.surrogate_documents) == (0, 2, 1)


def test_a_parquet_string_that_is_not_utf8_is_a_bad_record(tokenizer, tmp_path):
    path = tmp_path / "c.parquet"
    texts = pa.array([b"the fox", b"a \xed\xa0\x80 b", b"the dog", b"\xff"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts}), path, row_group_size=2)  # pyarrow writes it unchecked
    with pytest.raises(MiaFastError, match=r"c.parquet: row 2: 'text' is not valid UTF-8 \(byte 2\) \(skip such"):
        build_from_text([path], tokenizer)
    report = build_from_text([path], tokenizer, corpus=CorpusFormat(skip_bad_records=True))
    assert (report.bad_records, report.table.documents) == (2, 2)
    assert report.bad_examples == [
        f"{path}: row 2: 'text' is not valid UTF-8 (byte 2)",
        f"{path}: row 4: 'text' is not valid UTF-8 (byte 0)",
    ]


def test_a_json_array_given_as_a_corpus_is_told_a_json_corpus_is_json_lines(tmp_path):
    path = tmp_path / "data.json"
    for array in ('[{"text": "a"},\n {"text": "b"}]\n', '[{"text": "a"}, {"text": "b"}]\n'):
        path.write_text(array)
        with pytest.raises(MiaFastError, match=r"data.json:1: .* \(a .json corpus is JSON lines, not an array\)"):
            require_text([path])


def test_empty_and_missing_corpora(tokenizer, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(MiaFastError, match="holds no tokens"):
        build_from_text([empty], tokenizer)
    with pytest.raises(MiaFastError, match="no such file"):
        build_from_text([tmp_path / "missing.jsonl"], tokenizer)
    with pytest.raises(MiaFastError, match="matches no file"):
        build_from_text([str(tmp_path / "nothing-*.jsonl")], tokenizer)
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(MiaFastError, match="unsupported corpus format"):
        build_from_text([tmp_path / "notes.md"], tokenizer)
    (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(MiaFastError, match="broken.jsonl.gz: cannot read"):
        build_from_text([tmp_path / "broken.jsonl.gz"], tokenizer)
