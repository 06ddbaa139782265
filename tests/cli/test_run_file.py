"""Run files (``mia-fast run FILE``, ``--print-config``, the run.toml beside every output and report): a command line
comes back whole from its run file, a run from a run file scores the same bytes as the command line that wrote it,
flags after the file win, the key of a served model is never written, and each bad file is refused in one line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mia_fast.cli import main
from mia_fast.cli.main import build_parser
from mia_fast.cli.runfile import RunFileLayout, command_parser, run_file_argv

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


def parsed(argv: list[str]) -> argparse.Namespace:
    return build_parser([argv[0]]).parse_args(argv)


def run_file_of(argv: list[str]) -> str:
    return RunFileLayout(command_parser(build_parser([argv[0]]), argv[0]), argv[0]).write(parsed(argv))


def written(tmp_path: Path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def recorded(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in NOT_IN_A_RUN_FILE}


@pytest.mark.parametrize(
    "argv",
    [SCORE_ARGV, EVAL_ARGV, DEMO_ARGV, INFERENCE_ARGV, UNLEARNING_ARGV, CALIBRATE_ARGV],
    ids=lambda argv: argv[0],
)
def test_a_command_line_comes_back_whole_from_its_run_file(argv, tmp_path):
    path = written(tmp_path, run_file_of(argv))
    again = run_file_argv(["run", path], build_parser)
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
    args = parsed(run_file_argv(["run", written(tmp_path, text + 'report = "r"\n')], build_parser))
    assert (args.suspect, args.validation) == ("s.jsonl", "v.jsonl")


def test_flags_after_the_file_win(tmp_path):
    path = written(tmp_path, run_file_of(EVAL_ARGV))
    args = parsed(run_file_argv(["run", path, "--bootstrap", "7", "--blind-permutations", "5"], build_parser))
    assert args.bootstrap == 7 and args.blind_permutations == 5 and args.seed == 3


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            'command = "eval"\n[eval]\nbootstrapp = 5\n',
            "unknown key 'eval.bootstrapp' for eval; did you mean 'eval.bootstrap'?",
        ),
        (
            'command = "eval"\n[methods.samia]\nsampels = 5\n',
            "unknown key 'methods.samia.sampels' for eval; did you mean 'methods.samia.samples'?",
        ),
        (
            'command = "score"\n[output]\ntext_field = "body"\n',
            "unknown key 'output.text_field' for score; did you mean 'data.text_field'?",
        ),
        ('command = "eval"\n[eval]\nbootstrap = "many"\n', "eval.bootstrap: must be a whole number in [1, "),
        ('command = "eval"\n[eval]\nblind = 1\n', "eval.blind is a switch: true or false, not 1"),
        ('command = "eval"\n[model]\ndtype = "fp8"\n', "model.dtype: 'fp8' is not one of"),
        (
            'command = "eval"\n[methods.samia]\nseed = 1\n[methods.pac]\nseed = 2\n',
            "methods.samia.seed and methods.pac.seed are one setting (--method-seed) given two values; give it once",
        ),
        (
            'command = "freq"\n',
            "command 'freq'; a run file's command is one of score, rescore, eval, calibrate, classify, "
            "audit-unlearning, dataset-inference, demo",
        ),
        (
            "[eval]\nseed = 1\n",
            "no command; a run file's command is one of score, rescore, eval, calibrate, classify, audit-unlearning, "
            "dataset-inference, demo",
        ),
        ('command = "eval"\nseed = 1\n', "seed is a value outside any section: put it under [eval]"),
        ('command = "eval"\n[eval.seed]\nx = 1\n', "eval.seed is a table where a value belongs"),
        ('command = "eval"\n[eval\n', "not a TOML run file: "),
    ],
)
def test_a_bad_run_file_is_refused_in_one_line(text, line, tmp_path, capsys):
    path = written(tmp_path, text)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["run", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mia-fast: error: {path}: ") and line in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_missing_run_file_is_one_line(tmp_path, capsys):
    assert main(["run", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err.strip() == f"mia-fast: error: {tmp_path / 'none.toml'}: no such file"


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


def test_a_file_of_the_users_beside_an_output_is_refused_and_kept(tiny_model_dir, tmp_path, capsys):
    data, out = labelled(tmp_path), tmp_path / "s.jsonl"
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


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("a = 1\n", 0),
        ("[data]\nk = [1, [2, [3]]]\n", 3),
        ("[[t]]\n", 2),
        ('k = "[[[[" \n', 0),
        ("k = '[[[[\\' \n", 0),
        ('k = "\\"[[[" \n', 0),
        ('k = """\n[[[ "" \\""" ]]]"""\nj = [1]\n', 1),
        ("k = '''[[[ '' '''''\nj = {a = [1]}\n", 2),
        ("# [[[[\nk = [1]\n", 1),
        ('k = "unclosed [[\nj = [[1]]\n', 2),
    ],
)
def test_nesting_is_counted_outside_strings_and_comments(text, depth):
    import tomllib

    from mia_fast.cli.runfile import nesting_depth

    assert nesting_depth(text) == depth
    if "unclosed" not in text:
        tomllib.loads(text)  # each text is valid TOML: the depths are of real files
