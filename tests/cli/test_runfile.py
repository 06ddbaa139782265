"""Run files as the CLI writes them (``--print-config``, the run.toml beside every output and report): a command line
comes back whole from its run file, each option in the section of its kind and a method's settings under their own
names, flags after the file win, and the key of a served model is never written."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers import parsed, run_file_of, written

from mia_fast.cli import main
from mia_fast.cli.main import build_parser
from mia_fast.cli.run import run_file_argv

SCORE_ARGV = [
    "score",
    "texts.jsonl",
    "--model",
    "models/tiny-local-dir",
    "--ref-model",
    "models/tiny-ref-dir",
    "--dtype",
    "bf16",
    "--device",
    "cpu",
    "--text-field",
    "body",
    "--id-field",
    "key",
    "--label-field",
    "member",
    "--max-words",
    "64",
    "--methods",
    "loss,mink_0.2,samia,pac,neighbor,wbc,gradnorm",
    "--k",
    "0.05,0.3",
    "--no-prepend-start",
    "--max-length",
    "256",
    "--batch-tokens",
    "2048",
    "--backend",
    "torch",
    "--samia-samples",
    "3",
    "--method-seed",
    "7",
    "--pac-copies",
    "2",
    "--neighbor-model",
    "word-drop",
    "--neighbor-count",
    "4",
    "--wbc-windows",
    "2,3",
    "--gradnorm-norm",
    "inf",
    "--out",
    "s.parquet",
    "--block-rows",
    "64",
    "--stats-cache",
    "cache",
    "--online",
    "32",
    "--online-method",
    "mink_0.2",
    "--ray",
    "--shard-rows",
    "128",
]
EVAL_ARGV = [
    "eval",
    "--suite",
    "wikimia",
    "--split",
    "WikiMIA_length64",
    "--server",
    "http://127.0.0.1:8000",
    "--server-model",
    "served",
    "--api-key-env",
    "MY_KEY",
    "--server-timeout",
    "12.5",
    "--insecure-http",
    "--methods",
    "loss,zlib,minkpp_top20",
    "--report",
    "rep",
    "--bootstrap",
    "50",
    "--seed",
    "3",
    "--buckets",
    "32,64",
    "--no-blind",
]
DEMO_ARGV = [
    "demo",
    "--corpus",
    "corpus.txt",
    "--texts",
    "16",
    "--epochs",
    "2",
    "--lr",
    "0.0003",
    "--methods",
    "loss,neighbor,samia",
    "--neighbor-count",
    "2",
    "--samia-samples",
    "2",
    "--prefix-shots",
    "2",
    "--report",
    "r",
]
INFERENCE_ARGV = ["dataset-inference", "suspect.jsonl", "valid.jsonl", "--report", "di", "--seed", "2", "--k", "0.1"]
UNLEARNING_ARGV = ["audit-unlearning", "t.jsonl", "--before", "b", "--after", "a", "--method", "loss", "--report", "u"]
CALIBRATE_ARGV = ["calibrate", "v.jsonl", "--method", "mink_0.2", "--target-fpr", "0.05", "--out", "t.json"]
# What a run file leaves out: how to treat an output already there and how the run looks.
NOT_IN_A_RUN_FILE = {"run_file", "print_config", "resume", "overwrite", "quiet", "handler", "compare"}


def recorded(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in NOT_IN_A_RUN_FILE}


@pytest.mark.parametrize(
    "argv",
    [SCORE_ARGV, EVAL_ARGV, DEMO_ARGV, INFERENCE_ARGV, UNLEARNING_ARGV, CALIBRATE_ARGV],
    ids=lambda argv: argv[0],
)
def test_a_command_line_comes_back_whole_from_its_run_file(argv, tmp_path):
    path = written(tmp_path, run_file_of(argv))
    again, _ = run_file_argv(["run", path], build_parser)
    assert recorded(parsed(again)) == recorded(parsed(argv))


def test_a_run_file_is_sectioned_and_keeps_each_methods_settings_under_their_own_names():
    import tomllib

    text = run_file_of(SCORE_ARGV)
    document = tomllib.loads(text)
    assert document["command"] == "score"
    assert document["data"] == {
        "data": "texts.jsonl",
        "max_words": 64,
        "text_field": "body",
        "id_field": "key",
        "label_field": "member",
    }
    assert document["methods"]["names"] == ["loss", "mink_0.2", "samia", "pac", "neighbor", "wbc", "gradnorm"]
    assert document["methods"]["k"] == [0.05, 0.3]
    # --method-seed is samia's, pac's and neighbor's: written once, under the first of them.
    assert document["methods"]["neighbor"] == {"model": "word-drop", "count": 4, "seed": 7}
    assert document["methods"]["samia"] == {"samples": 3} and document["methods"]["pac"] == {"copies": 2}
    assert document["methods"]["wbc"] == {"windows": [2, 3]} and "norm = inf" in text
    assert document["model"]["prepend_start"] is False and document["output"]["out"] == "s.parquet"
    assert "server" not in document  # no served model: its defaults say nothing


def test_the_key_of_a_served_model_is_never_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MY_KEY", "sk-secret-value")
    assert main([*EVAL_ARGV, "--print-config"]) == 0
    text = capsys.readouterr().out
    assert 'api_key_env = "MY_KEY"' in text and "sk-secret" not in text


def test_positionals_keep_their_order_whatever_the_files(tmp_path):
    text = 'command = "dataset-inference"\n[data]\nvalidation = "v.jsonl"\nsuspect = "s.jsonl"\n[dataset-inference]\n'
    args = parsed(run_file_argv(["run", written(tmp_path, text + 'report = "r"\n')], build_parser)[0])
    assert (args.suspect, args.validation) == ("s.jsonl", "v.jsonl")


def test_flags_after_the_file_win(tmp_path):
    path = written(tmp_path, run_file_of(EVAL_ARGV))
    args = parsed(run_file_argv(["run", path, "--bootstrap", "7", "--blind-permutations", "5"], build_parser)[0])
    assert args.bootstrap == 7 and args.blind_permutations == 5 and args.seed == 3


def test_a_file_of_the_users_beside_an_output_is_refused_and_kept(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    data, out = labelled_jsonl, tmp_path / "s.jsonl"
    mine = tmp_path / "s.jsonl.run.toml"
    mine.write_text("my notes\n")
    argv = ["score", str(data), "--model", str(tiny_model_dir), "--methods", "loss", "--out", str(out), "--quiet"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"mia-fast: error: {mine} is not a run file of mia-fast; it was left as it is: move it away, or choose "
        "another --out"
    )
    assert mine.read_text() == "my notes\n" and not out.exists()


def test_the_example_run_file_is_a_valid_eval(capsys, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    assert main(["run", "examples/audit.toml", "--print-config"]) == 0
    text = capsys.readouterr().out
    assert (
        'command = "eval"' in text and "[methods.samia]" in text and 'data = "examples/famous_vs_fresh.jsonl"' in text
    )
