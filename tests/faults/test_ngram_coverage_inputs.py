"""The n-gram coverage attack's bad inputs: a text too short for a prompt and n compared words, settings out of
range, its word tools missing. Each is one line (exit 2) before any model loads, every file as it was."""

import re
import sys

import pytest
from helpers import refused, write_jsonl

from mia_fast import NgramCoverageSettings
from mia_fast.errors import MiaFastError
from mia_fast.methods import ngram_coverage


@pytest.fixture
def no_model_load(monkeypatch):
    monkeypatch.setattr("mia_fast.pipeline.models.load_model", lambda *args: pytest.fail("a model was loaded"))


def score_refused(capsys, tmp_path, model_dir, rows, *args) -> str:
    data = write_jsonl(tmp_path / "in" / "d.jsonl", rows)
    out = tmp_path / "out" / "s.jsonl"
    return refused(capsys, "score", data, "--model", model_dir, "--out", out, "--quiet", *args, keep=[tmp_path])


def test_a_text_too_short_to_split_is_named_before_any_model_loads(tiny_model_dir, tmp_path, capsys, no_model_load):
    rows = [{"text": "one two three four five six seven"}, {"text": ""}, {"text": "far too short"}]
    line = score_refused(capsys, tmp_path, tiny_model_dir, rows, "--methods", "loss,ngram_coverage")
    assert line == (
        "mia-fast: error: text 3 ('far too short') is too short for the n-gram coverage attack: of its 3 word(s), "
        "1 would follow a prompt (--ngram-suffix 0.5), fewer than --ngram-n 3"
    )


def test_the_split_follows_the_settings(tiny_model_dir, tmp_path, capsys, no_model_load):
    rows = [{"text": "one two three four five six seven eight nine ten"}]
    line = score_refused(
        capsys, tmp_path, tiny_model_dir, rows, "--methods", "ngram_creativity", "--ngram-suffix", "0.2"
    )
    assert "of its 10 word(s), 2 would follow a prompt (--ngram-suffix 0.2), fewer than --ngram-n 3" in line


@pytest.mark.parametrize(
    ("option", "field", "value", "expected"),
    [
        ("--ngram-samples", "samples", "0", "must be a whole number in [1, 1000]"),
        ("--ngram-n", "n", "2.5", "must be a whole number in [1, 1000]"),
        ("--ngram-suffix", "suffix", "0", "must be a number in (0, 1]"),
        ("--ngram-suffix", "suffix", "1.5", "must be a number in (0, 1]"),
        ("--ngram-new-tokens", "new_tokens", "-1", "must be a whole number in [0, 1048576]"),
    ],
)
def test_settings_out_of_range_are_refused_as_parsed(option, field, value, expected, tiny_model_dir, tmp_path, capsys):
    rows = [{"text": "one two three four five six seven"}]
    line = score_refused(capsys, tmp_path, tiny_model_dir, rows, "--methods", "ngram_coverage", option, value)
    assert f"argument {option}: {expected}, got '{value}'" in line, line
    with pytest.raises(MiaFastError, match=re.escape(f"NgramCoverageSettings.{field} ({option}) {expected}")):
        NgramCoverageSettings(**{field: float(value)})


def test_missing_word_tools_are_one_line_with_the_fix(tiny_model_dir, tmp_path, capsys, monkeypatch, no_model_load):
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # import sacremoses raises ImportError
    ngram_coverage.word_tools.cache_clear()
    try:
        rows = [{"text": "one two three four five six seven"}]
        line = score_refused(capsys, tmp_path, tiny_model_dir, rows, "--methods", "ngram_coverage")
    finally:
        ngram_coverage.word_tools.cache_clear()
    assert line == (
        "mia-fast: error: the n-gram coverage attack needs nltk, sacremoses and unidecode: "
        "pip install 'mia-fast[ngram]'"
    )
