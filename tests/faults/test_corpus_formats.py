"""Corpus formats, one rule, from the command line: a folder reads every file the table of suffixes names (``.json``
lines, compressed ``.txt``, ``.zstd``, upper case) and names the rest in one warning line; a symlink loop is named as
one; raw invalid UTF-8 in JSON lines and in a parquet column is a bad record (one line, or skipped and counted with
--skip-bad-records), never a lone surrogate or a traceback."""

from __future__ import annotations

import gzip

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import refused, run_cli, write_jsonl

from mia_fast.data.readers import ZSTD
from mia_fast.frequency.table import FrequencyTable


def built(capsys, *args) -> tuple[FrequencyTable, list[str]]:
    """The table a build that succeeds writes, and its stderr lines."""
    capsys.readouterr()
    assert run_cli("freq", "build", *args, "--quiet") == 0
    out = args[args.index("--out") + 1]
    return FrequencyTable.load(out), capsys.readouterr().err.strip().splitlines()


def test_a_folder_reads_every_corpus_format_and_names_what_it_skips(tiny_model_dir, tmp_path, capsys):
    folder = tmp_path / "corpus"
    write_jsonl(folder / "a.jsonl", [{"text": "the quick brown fox"}, {"text": "jumps over"}])
    write_jsonl(folder / "b.json", [{"text": "the lazy dog"}, {"text": "a journey of"}])  # half the corpus
    (folder / "c.txt.gz").write_bytes(gzip.compress(b"a thousand miles\n"))
    (folder / "d.jsonl.zstd").write_bytes(ZSTD.compress(b'{"text": "begins with"}\n'))
    write_jsonl(folder / "E.JSONL", [{"text": "a single step"}])
    (folder / "paper.pdf").write_bytes(b"%PDF")
    (folder / "notes.docx").write_bytes(b"PK")
    (folder / "loop.jsonl").symlink_to(folder / "loop.jsonl")
    table, err = built(capsys, folder, "--tokenizer", tiny_model_dir, "--out", tmp_path / "t.freq")
    assert table.documents == 7
    assert err[0] == (
        f"mia-fast: warning: skipped 3 files in {folder} that are no corpus file: 1 .docx, 1 .pdf, 1 loop of links"
    )
    assert not any("warning" in line for line in err[1:])  # said once, though the build lists the folder twice
    alone, _ = built(capsys, folder / "b.json", "--tokenizer", tiny_model_dir, "--out", tmp_path / "b.freq")
    assert alone.documents == 2  # a .json named directly is JSON lines too
    globbed, err = built(capsys, f"{folder}/*.*", "--tokenizer", tiny_model_dir, "--out", tmp_path / "g.freq")
    assert globbed.documents == 7 and err[0].endswith("1 .docx, 1 .pdf, 1 loop of links")


def test_a_symlink_loop_is_named_as_one(tmp_path, capsys):
    (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
    line = refused(
        capsys, "freq", "build", tmp_path / "loop.jsonl", "--tokenizer", "default", "--out", tmp_path / "t.freq"
    )
    assert line == f"mia-fast: error: {tmp_path / 'loop.jsonl'}: a loop of links"


def test_raw_invalid_utf8_in_json_lines_is_a_bad_record(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"text": "the fox"}\n{"text": "a \xed\xa0\x80 b"}\n{"text": "the dog"}\n')
    build = ["freq", "build", corpus, "--tokenizer", tiny_model_dir, "--out", tmp_path / "t.freq", "--quiet"]
    line = refused(capsys, *build, keep=[tmp_path])
    assert line == f"mia-fast: error: {corpus}:2: not valid UTF-8 (byte 12) (skip such records with --skip-bad-records)"
    table, err = built(capsys, *build[2:], "--skip-bad-records")
    assert table.documents == 2
    assert err[:2] == ["skipped 1 bad record(s), e.g.:", f"  {corpus}:2: not valid UTF-8 (byte 12)"]


@pytest.fixture
def bad_parquet(tmp_path):
    path = tmp_path / "c.parquet"
    texts = pa.array([b"the fox", b"a \xed\xa0\x80 b", b"the dog"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts, "id": [1, 2, 3]}), path)  # pyarrow writes it unchecked
    return path


def test_invalid_utf8_in_a_parquet_corpus_column_is_a_bad_record(bad_parquet, tiny_model_dir, tmp_path, capsys):
    build = ["freq", "build", bad_parquet, "--tokenizer", tiny_model_dir, "--out", tmp_path / "t.freq", "--quiet"]
    line = refused(capsys, *build, keep=[tmp_path])
    assert line == (
        f"mia-fast: error: {bad_parquet}: row 2: 'text' is not valid UTF-8 (byte 2) (skip such records with "
        "--skip-bad-records)"
    )
    table, err = built(capsys, *build[2:], "--skip-bad-records")
    assert table.documents == 2
    assert err[:2] == ["skipped 1 bad record(s), e.g.:", f"  {bad_parquet}: row 2: 'text' is not valid UTF-8 (byte 2)"]


def test_invalid_utf8_in_parquet_data_to_score_names_its_row(bad_parquet, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    line = refused(capsys, "score", bad_parquet, "--model", tiny_model_dir, "--out", out, keep=[tmp_path])
    assert line == f"mia-fast: error: {bad_parquet}: row 2: 'text' is not valid UTF-8 (byte 2)"
