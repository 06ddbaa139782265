"""Text corpora: the files a source names (a file, a directory, a glob), every document of each format with how far
into the file it is, bad records refused or skipped and counted, and corpora without text refused before any
tokenizer is loaded."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import train_tokenizer

from mia_fast.errors import MiaFastError
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
    name = path.name
    if name.endswith(".txt"):
        path.write_text("".join(d + "\n" for d in documents), encoding="utf-8")
    elif name.endswith(".parquet"):
        pq.write_table(pa.table({field: documents}), path, row_group_size=2)
    else:
        lines = "".join(json.dumps({field: d}) + "\n" for d in documents).encode()
        path.write_bytes(gzip.compress(lines) if name.endswith(".gz") else lines)
    return path


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".jsonl.gz", ".json.gz", ".parquet"])
def test_every_format_gives_its_documents_with_how_far_the_read_is(tmp_path, suffix):
    path = write_documents(tmp_path / f"c{suffix}", DOCUMENTS, field="body")
    documents = list(iter_documents(path, "body", BadRecords()))
    texts, positions = [text for text, _ in documents], [position for _, position in documents]
    # A .txt file's blank line is no document; a JSON or parquet record of empty text is one.
    assert texts == ([d for d in DOCUMENTS if d] if suffix == ".txt" else DOCUMENTS)
    assert positions == sorted(positions) and 0 < positions[-1] <= path.stat().st_size


def test_sources_are_files_directories_and_globs(tmp_path):
    (tmp_path / "shards" / "deeper").mkdir(parents=True)
    for name in ("shards/b.jsonl", "shards/deeper/a.txt", "shards/notes.md", "c.parquet"):
        (tmp_path / name).write_text("x")
    found = expand_sources([tmp_path / "shards", str(tmp_path / "*.parquet")])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["shards/b.jsonl", "shards/deeper/a.txt", "c.parquet"]
    with pytest.raises(MiaFastError, match=r"deeper: no corpus files \(\.parquet\) in this directory"):
        expand_sources([tmp_path / "shards" / "deeper"], suffixes=(".parquet",))
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
