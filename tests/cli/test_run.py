"""``mia-fast run FILE``: a run from a run file writes the same bytes as the command line that wrote it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_file_of

from mia_fast.cli import main


def test_run_without_a_file_asks_for_one(capsys):
    assert main(["run"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


def labelled(tmp_path: Path) -> Path:
    data = tmp_path / "texts.jsonl"
    texts = ["the quick brown fox", "all that glitters is not gold", "to be or not to be", "a journey of miles"]
    data.write_text("".join(json.dumps({"text": t, "label": i % 2}) + "\n" for i, t in enumerate(texts)))
    return data


def test_score_from_its_run_file_writes_the_same_bytes(tiny_model_dir, tmp_path, capsys):
    data, out = labelled(tmp_path), tmp_path / "s.jsonl"
    argv = ["score", str(data), "--model", str(tiny_model_dir), "--methods", "loss,zlib,mink,samia"]
    assert main([*argv, "--samia-samples", "2", "--out", str(out), "--quiet"]) == 0
    run_file = tmp_path / "s.jsonl.run.toml"
    assert run_file.read_text() == run_file_of([*argv, "--samia-samples", "2", "--out", str(out)])
    again = tmp_path / "again.jsonl"
    assert main(["run", str(run_file), "--out", str(again), "--quiet"]) == 0
    assert again.read_bytes() == out.read_bytes()
    assert (tmp_path / "again.jsonl.run.toml").read_text() == run_file.read_text().replace(str(out), str(again))


def test_eval_from_its_run_file_writes_the_same_scores_and_metrics(tiny_model_dir, tmp_path, capsys):
    data = labelled(tmp_path)
    argv = ["eval", str(data), "--model", str(tiny_model_dir), "--methods", "loss,zlib", "--bootstrap", "20"]
    assert main([*argv, "--report", str(tmp_path / "r"), "--quiet"]) == 0
    assert main(["run", str(tmp_path / "r" / "run.toml"), "--report", str(tmp_path / "r2"), "--quiet"]) == 0
    first, again = tmp_path / "r", tmp_path / "r2"
    assert (again / "scores.jsonl").read_bytes() == (first / "scores.jsonl").read_bytes()
    # The metrics name their scores file, which is in the other report.
    assert (again / "metrics.json").read_text() == (first / "metrics.json").read_text().replace(str(first), str(again))
    assert (again / "run.toml").read_text() == (first / "run.toml").read_text().replace(str(first), str(again))


def test_demo_from_its_run_file_writes_the_same_scores(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    words = "the quick brown fox jumps over a lazy dog while rain falls on plain spain and gold glitters".split()
    corpus.write_text("\n".join(" ".join(words[i:] + words[:i]) for i in range(16)) + "\n")
    argv = ["demo", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--texts", "8", "--epochs", "1"]
    argv += ["--max-tokens", "16", "--methods", "loss,zlib,neighbor,samia", "--neighbor-count", "2"]
    argv += ["--samia-samples", "2", "--bootstrap", "10", "--no-blind", "--quiet"]
    assert main([*argv, "--report", str(tmp_path / "r")]) == 0
    assert main(["run", str(tmp_path / "r" / "run.toml"), "--report", str(tmp_path / "r2"), "--quiet"]) == 0
    assert (tmp_path / "r2" / "scores.jsonl").read_bytes() == (tmp_path / "r" / "scores.jsonl").read_bytes()
