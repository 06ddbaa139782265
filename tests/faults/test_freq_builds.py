"""Frequency builds refuse what would make a wrong table or litter, in one line, before a tokenizer is loaded: a
corpus file reached twice (it would be counted twice), a named pipe, a second build of an output another build is
writing (refused naming the first one's PID; the first one's table is a clean build's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import PROGRESS_CAP_S, refused, run_cli, wait_until, write_jsonl

from mia_fast.frequency.table import FrequencyTable, FrequencyTableError
from mia_fast.pipeline import models

# A build that holds its output's lock, then waits for the file named by its second argument before it loads the
# tokenizer (touching the file named by its first once it holds the lock): a build caught in the middle, at a moment
# the test chooses, whatever the machine's speed.
HELD_BUILD = """
import sys, time
from pathlib import Path
from mia_fast.cli.main import main
from mia_fast.pipeline import models
load = models.load_tokenizer
def held(name):
    Path(sys.argv[1]).touch()
    while not Path(sys.argv[2]).exists():
        time.sleep(0.02)
    return load(name)
models.load_tokenizer = held
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture
def no_tokenizer(monkeypatch):
    def refuse(name):
        raise AssertionError("the tokenizer was loaded")

    monkeypatch.setattr(models, "load_tokenizer", refuse)


def corpus_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [{"text": "the quick brown fox"}, {"text": "jumps over the lazy dog"}])
    write_jsonl(folder / "b.jsonl", [{"text": "a journey of a thousand miles"}])
    return folder


@pytest.mark.parametrize("route", ["the same path", "a folder and a file in it", "a link", "a glob and a folder"])
def test_a_corpus_file_given_twice_is_refused_by_every_route(route, tmp_path, capsys, no_tokenizer):
    folder = corpus_folder(tmp_path)
    (tmp_path / "link.jsonl").symlink_to(folder / "a.jsonl")
    sources, spellings = {
        "the same path": ([folder / "a.jsonl", folder / "a.jsonl"], [f"as {folder / 'a.jsonl'} and as"]),
        "a folder and a file in it": ([folder, folder / "a.jsonl"], [f"(in {folder})", f"and as {folder / 'a.jsonl'}"]),
        "a link": ([folder, tmp_path / "link.jsonl"], [f"(in {folder})", f"and as {tmp_path / 'link.jsonl'}"]),
        "a glob and a folder": ([f"{folder}/*.jsonl", folder], [f"(in {folder}/*.jsonl)", f"(in {folder}): "]),
    }[route]
    out = tmp_path / "t.freq"
    line = refused(capsys, "freq", "build", *sources, "--tokenizer", "default", "--out", out, keep=[tmp_path])
    assert "one file is given twice" in line and "give each corpus file once" in line
    for spelling in spellings:
        assert spelling in line


def test_a_named_pipe_is_named_as_one(tmp_path, capsys, no_tokenizer):
    os.mkfifo(tmp_path / "pipe.jsonl")
    line = refused(
        capsys, "freq", "build", tmp_path / "pipe.jsonl", "--tokenizer", "default", "--out", tmp_path / "t.freq"
    )
    assert f"{tmp_path / 'pipe.jsonl'}: a named pipe (FIFO), not a corpus file" in line


def test_a_table_that_exists_names_the_flag_with_its_dashes(tmp_path):
    table = FrequencyTable(np.ones(4, np.uint64), 4, 1)
    table.save(tmp_path / "t.freq")
    with pytest.raises(FrequencyTableError, match="exists; pass --overwrite"):
        table.save(tmp_path / "t.freq")


def test_a_second_build_of_one_output_is_refused_and_the_first_writes_a_clean_table(tiny_model_dir, tmp_path, capsys):
    folder = corpus_folder(tmp_path)
    clean = tmp_path / "clean.freq"
    assert run_cli("freq", "build", folder, "--tokenizer", tiny_model_dir, "--out", clean, "--quiet") == 0
    out, holding, go = tmp_path / "t.freq", tmp_path / "holding", tmp_path / "go"
    build = ["freq", "build", folder, "--tokenizer", tiny_model_dir, "--out", out, "--quiet"]
    first = subprocess.Popen(
        [sys.executable, "-c", HELD_BUILD, holding, go, *map(str, build)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(holding.exists, "the first build held its lock", first)
        line = refused(capsys, *build, keep=[tmp_path])
        assert f"{out} is being written by process {first.pid} (lock t.freq.lock)" in line
    finally:
        go.touch()
        _, err = first.communicate(timeout=PROGRESS_CAP_S)
    assert first.returncode == 0, err
    np.testing.assert_array_equal(FrequencyTable.load(out).counts, FrequencyTable.load(clean).counts)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.freq", "corpus", "go", "holding", "t.freq"]
