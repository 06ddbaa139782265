"""CAMIA's bad inputs, each refused in one line before any model loads (loading one fails the test), nothing
written: no known non-members, a non-member file without texts, and scored texts that are also non-member
reference texts."""

from __future__ import annotations

import pytest
from helpers import refused, write_jsonl

from mia_fast.pipeline import models

SCORED = ["the first scored text of this file", "a second scored text", "and a third one"]


@pytest.fixture
def camia_run(tmp_path, tiny_model_dir, monkeypatch) -> list:
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", no_loading)
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": t} for t in SCORED])
    return ["score", data, "--methods", "loss,camia", "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl"]


def test_camia_without_nonmembers_is_refused(camia_run, tmp_path, capsys):
    line = refused(capsys, *camia_run, keep=[tmp_path])
    assert "method 'camia' needs known non-member texts (--nonmembers FILE)" in line


def test_an_empty_nonmember_file_is_refused(camia_run, tmp_path, capsys):
    empty = tmp_path / "nonmembers.txt"
    empty.write_text("\n  \n")
    line = refused(capsys, *camia_run, "--nonmembers", empty, keep=[tmp_path])
    assert "nonmembers.txt: holds no texts" in line


def test_scored_texts_among_the_nonmembers_are_refused(camia_run, tmp_path, capsys):
    known = tmp_path / "nonmembers.txt"
    known.write_text(f"a known non-member text\n{SCORED[1]}  \n")
    line = refused(capsys, *camia_run, "--nonmembers", known, keep=[tmp_path])
    assert "1 scored text(s) are also non-member reference texts (e.g. 'a second scored text')" in line
