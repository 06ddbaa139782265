"""Served scores equal local ones by default: without --tokenizer the served model's own tokenizer is taken where
it is here (by what /v1/models says the model was loaded from, or by the served name), so ids and the start token
are a local run's; where it is not, one line says how the scores differ and how to match them, and the manifest
records what was done. (The real vLLM server: tests/test_vllm_scoring.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_jsonl, run_cli, script, write_jsonl

faulty_server = script("faulty_server")


@pytest.fixture
def data(tmp_path):
    rows = [{"text": "the rain in spain", "label": 1}, {"text": "stays mainly in the plain", "label": 0}]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def served(url, data, out, *extra):
    return ["score", data, "--server", url, "--server-model", "tiny", "--methods", "loss", "--out", out, *extra]


def target_engine(out: Path) -> dict:
    return json.loads(Path(f"{out}.manifest.json").read_text())["engines"]["target"]


def test_the_served_models_own_tokenizer_is_found_by_its_root(tiny_model_dir, data, tmp_path, capsys):
    out, local = tmp_path / "served.jsonl", tmp_path / "local.jsonl"
    with faulty_server.serving("good", root=str(tiny_model_dir)) as url:
        assert run_cli(*served(url, data, out, "--quiet")) == 0
    err = capsys.readouterr().err
    assert f"tokenizer: the served model's own, found here at {tiny_model_dir}" in err and "warning" not in err
    assert run_cli("score", data, "--model", tiny_model_dir, "--methods", "loss", "--out", local, "--quiet") == 0
    # The same ids as a local run, start token included (the fake server's log-probs are its own).
    assert [r["n_tokens"] for r in read_jsonl(out)] == [r["n_tokens"] for r in read_jsonl(local)]
    engine = target_engine(out)
    assert engine["prepend_start"] is True and engine["tokenizer"] != "the server's"


def test_without_the_tokenizer_here_one_line_says_how_to_match_and_the_manifest_says_what_was_done(
    data, tmp_path, capsys
):
    out = tmp_path / "served.jsonl"
    with faulty_server.serving("good") as url:
        assert run_cli(*served(url, data, out, "--quiet")) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mia-fast: warning:")]
    assert len(warnings) == 1
    assert "without the start token a local run prepends" in warnings[0] and "--tokenizer NAME" in warnings[0]
    engine = target_engine(out)
    assert engine["prepend_start"] is False and engine["tokenizer"] == "the server's"


def test_no_start_token_asked_for_is_no_warning(data, tmp_path, capsys):
    out = tmp_path / "served.jsonl"
    with faulty_server.serving("good") as url:
        assert run_cli(*served(url, data, out, "--quiet", "--no-prepend-start")) == 0
    assert "warning" not in capsys.readouterr().err
    assert target_engine(out)["prepend_start"] is False
