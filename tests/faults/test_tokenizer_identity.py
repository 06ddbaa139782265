"""A tokenizer is all of its tokenizer.json: a model whose tokenizer gained a Lowercase normalizer gives other ids for
the same text, so nothing counted or scored with the old one is taken for its own. The stats cache computes again, a
resumed score or frequency build is refused naming the normalizer, and so is a frequency table given to a method or
to ``freq info --tokenizer``; a table of an older mia-fast (whose fingerprint covered less) is used with one warning
where what it recorded matches. A tokenizer with BPE dropout (random ids) is refused for counting and scoring."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FAST, fail_writes, read_jsonl, refused, run_cli, write_jsonl

from mia_fast.frequency import text_build
from mia_fast.frequency.table import FrequencyTable
from mia_fast.pipeline.models import load_tokenizer
from mia_fast.tokens import fingerprint

TEXTS = [
    "The Quick Brown Fox Jumps Over The Lazy Dog",
    "To Be Or Not To Be, That Is The Question",
    "All That Glitters Is Not Gold",
    "A Journey Of A Thousand Miles Begins With A Single Step",
    "The Rain In Spain Stays Mainly In The Plain",
    "Numbers 0123456789 And Punctuation: Commas, Dots. Question? Yes!",
]


def edit_tokenizer(model: Path, **changes) -> None:
    """Changes the top-level sections (and ``model_<option>`` options) of ``model``'s tokenizer.json."""
    path = model / "tokenizer.json"
    spec = json.loads(path.read_text())
    for key, value in changes.items():
        if key.startswith("model_"):
            spec["model"][key.removeprefix("model_")] = value
        else:
            spec[key] = value
    path.write_text(json.dumps(spec))


@pytest.fixture
def model(tiny_model_dir, tmp_path) -> Path:
    """A copy of the tiny model, whose tokenizer a test may change."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


@pytest.fixture
def data(tmp_path) -> Path:
    return write_jsonl(tmp_path / "data.jsonl", [{"id": i, "text": t, "label": i % 2} for i, t in enumerate(TEXTS)])


def score(data, model, out, *extra):
    return ["score", data, "--model", model, "--out", out, *FAST, "--block-rows", "2", *extra]


def losses(path: Path) -> list[float]:
    return [row["loss"] for row in read_jsonl(path)]


def test_the_normalizer_changes_the_ids(model):
    before = load_tokenizer(str(model))(TEXTS)["input_ids"]
    edit_tokenizer(model, normalizer={"type": "Lowercase"})
    assert load_tokenizer(str(model))(TEXTS)["input_ids"] != before


def test_the_stats_cache_does_not_serve_another_tokenization(model, data, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert run_cli(*score(data, model, tmp_path / "before.jsonl", "--stats-cache", cache)) == 0
    edit_tokenizer(model, normalizer={"type": "Lowercase"})
    capsys.readouterr()
    assert run_cli(*score(data, model, tmp_path / "cached.jsonl", "--stats-cache", cache)) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if "stats cache" in line]
    assert len(note) == 1 and "under another tokenizer (their normalizers differ); they are not used" in note[0]
    assert run_cli(*score(data, model, tmp_path / "clean.jsonl")) == 0
    assert losses(tmp_path / "cached.jsonl") == losses(tmp_path / "clean.jsonl")
    assert losses(tmp_path / "cached.jsonl") != losses(tmp_path / "before.jsonl")


def test_stats_an_older_mia_fast_cached_are_named_and_not_used(model, data, tmp_path, capsys):
    cache = tmp_path / "cache"
    assert run_cli(*score(data, model, tmp_path / "before.jsonl", "--stats-cache", cache)) == 0
    (folder,) = [p.parent for p in cache.glob("*/settings.json")]
    settings = json.loads((folder / "settings.json").read_text())
    settings["tokenizer"] = fingerprint._legacy_fingerprint(load_tokenizer(str(model)))
    (folder / "settings.json").write_text(json.dumps(settings))
    folder.rename(cache / "0123456789abcdef01234567")
    capsys.readouterr()
    assert run_cli(*score(data, model, tmp_path / "again.jsonl", "--stats-cache", cache)) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if "stats cache" in line]
    assert len(note) == 1 and "0123456789abcdef01234567 holds the stats of" in note[0]
    assert "from an older mia-fast" in note[0] and "they are not used" in note[0]


def test_a_resumed_score_is_refused_naming_the_normalizer(model, data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "scores.jsonl"
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=2)
        assert run_cli(*score(data, model, out)) == 2
    edit_tokenizer(model, normalizer={"type": "Lowercase"})
    line = refused(capsys, *score(data, model, out, "--resume"), keep=[tmp_path])
    assert "was scored with another target model setting (tokenizer: its normalizer differs)" in line
    assert "--overwrite" in line


def _interrupted_build(model: Path, tmp_path: Path, monkeypatch) -> tuple[list[str], Path]:
    """A freq build stopped after its first of three shards: OUT.partial holds one."""
    for i in range(3):
        write_jsonl(tmp_path / "corpus" / f"s{i}.jsonl", [{"text": t} for t in TEXTS[i::3]])
    out = tmp_path / "t.freq"
    args = ["freq", "build", tmp_path / "corpus", "--tokenizer", model, "--out", out, "--quiet"]
    count_piece = text_build.count_piece

    def stops_at_the_second_shard(piece, job):
        if piece.file == 1:
            raise KeyboardInterrupt
        return count_piece(piece, job)

    with monkeypatch.context() as patched:
        patched.setattr(text_build, "count_piece", stops_at_the_second_shard)
        assert run_cli(*args) != 0
    partial = out.with_name("t.freq.partial")
    assert (partial / "shard-000000.freq").is_file()
    return args, partial


def test_a_resumed_freq_build_is_refused_naming_the_normalizer(model, tmp_path, monkeypatch, capsys):
    args, partial = _interrupted_build(model, tmp_path, monkeypatch)
    edit_tokenizer(model, normalizer={"type": "Lowercase"})
    line = refused(capsys, *args, keep=[tmp_path])
    assert f"{partial} holds an unfinished build counted with another tokenizer (their normalizers differ)" in line
    assert "--overwrite" in line


def test_a_freq_build_an_older_mia_fast_began_is_not_resumed(model, tmp_path, monkeypatch, capsys):
    args, partial = _interrupted_build(model, tmp_path, monkeypatch)
    manifest = json.loads((partial / "manifest.json").read_text())
    manifest["settings"]["tokenizer_fingerprint"] = fingerprint._legacy_fingerprint(load_tokenizer(str(model)))
    (partial / "manifest.json").write_text(json.dumps(manifest))
    line = refused(capsys, *args, keep=[tmp_path])
    assert "written by an older mia-fast whose tokenizer identity cannot be proven" in line and "--overwrite" in line


@pytest.fixture
def table_of_the_model_without_its_normalizer(model, tmp_path) -> Path:
    """A table counted by ``model``'s tokenizer, which then gains a Lowercase normalizer."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": t} for t in TEXTS])
    table = tmp_path / "t.freq"
    assert run_cli("freq", "build", corpus, "--tokenizer", model, "--out", table, "--quiet") == 0
    edit_tokenizer(model, normalizer={"type": "Lowercase"})
    return table


def test_a_table_of_another_tokenizer_is_refused_by_a_method(
    table_of_the_model_without_its_normalizer, model, data, tmp_path, capsys
):
    table = table_of_the_model_without_its_normalizer
    args = ["score", data, "--model", model, "--out", tmp_path / "o.jsonl", "--methods", "dcpdd", "--freq-table", table]
    line = refused(capsys, *args, "--quiet", keep=[tmp_path])
    assert "was built with another tokenizer (their normalizers differ)" in line and "freq build" in line


def test_a_table_of_another_tokenizer_is_refused_by_freq_info(
    table_of_the_model_without_its_normalizer, model, tmp_path, capsys
):
    table = table_of_the_model_without_its_normalizer
    line = refused(capsys, "freq", "info", table, "--tokenizer", model, keep=[tmp_path])
    assert f"{table} was built with another tokenizer (their normalizers differ)" in line
    assert capsys.readouterr().out == ""


def _table_of_an_older_mia_fast(path: Path, tokenizer_dir: Path) -> Path:
    legacy = fingerprint._legacy_fingerprint(load_tokenizer(str(tokenizer_dir)))
    size = len(load_tokenizer(str(tokenizer_dir)))
    FrequencyTable(np.ones(size, np.uint64), size, 1, tokenizer_fingerprint=legacy).save(path)
    return path


def test_a_table_of_an_older_mia_fast_is_used_with_one_warning(model, tmp_path, capsys):
    table = _table_of_an_older_mia_fast(tmp_path / "old.freq", model)
    capsys.readouterr()
    assert run_cli("freq", "info", table, "--tokenizer", model, "--top", "3") == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mia-fast: ")]
    assert len(said) == 1 and said[0].startswith("mia-fast: warning: ")
    assert "built by an older mia-fast" in said[0] and "cannot be checked" in said[0] and "freq build" in said[0]


def test_a_table_of_an_older_mia_fast_and_another_vocabulary_is_refused(
    model, tiny_reference_dir, data, tmp_path, capsys
):
    table = _table_of_an_older_mia_fast(tmp_path / "old.freq", tiny_reference_dir)
    args = ["score", data, "--model", model, "--out", tmp_path / "o.jsonl", "--methods", "dcpdd", "--freq-table", table]
    line = refused(capsys, *args, "--quiet", keep=[tmp_path])
    assert "(even their vocabularies, merges or added tokens differ)" in line


def test_bpe_dropout_is_refused_for_counting_and_scoring(model, data, tmp_path, capsys):
    edit_tokenizer(model, model_dropout=0.1)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": t} for t in TEXTS])
    for args in (
        ["freq", "build", corpus, "--tokenizer", model, "--out", tmp_path / "t.freq"],
        score(data, model, tmp_path / "o.jsonl"),
    ):
        line = refused(capsys, *args, keep=[tmp_path])
        assert "model.dropout = 0.1 in its tokenizer.json makes tokenization random" in line
