"""Reading a run file: each bad file is refused in one line that names the file, and nothing is written; nesting is
counted outside strings and comments before the TOML parser sees the text."""

from __future__ import annotations

import pytest
from helpers import written

from mia_fast.cli import main
from mia_fast.cli.main import build_parser
from mia_fast.cli.runfile import RunFileLayout, command_parser
from mia_fast.cli.runfile_reader import command_line, nesting_depth, read_run_file, source_name
from mia_fast.errors import MiaFastError


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

    assert nesting_depth(text) == depth
    if "unclosed" not in text:
        tomllib.loads(text)  # each text is valid TOML: the depths are of real files


def test_a_file_is_named_by_its_path_and_stdin_as_standard_input():
    assert source_name("-") == "standard input"
    assert source_name("runs/a.toml") == "runs/a.toml"


def test_a_file_nested_too_deep_or_not_utf8_is_refused_before_parsing(tmp_path):
    deep = written(tmp_path, 'command = "eval"\n[eval]\nseed = ' + "[" * 40 + "]" * 40 + "\n")
    with pytest.raises(MiaFastError, match="nest 40 deep"):
        read_run_file(deep)
    binary = tmp_path / "b.toml"
    binary.write_bytes(b'command = "eval"\n\xff\n')
    with pytest.raises(MiaFastError, match=r"not a TOML run file \(not UTF-8 text\)"):
        read_run_file(str(binary))


def test_a_document_becomes_its_command_line_positionals_first():
    layout = RunFileLayout(command_parser(build_parser(["eval"]), "eval"), "eval")
    document = {"command": "eval", "eval": {"seed": 3, "blind": False}, "data": {"data": "d.jsonl"}}
    assert command_line(layout, document, "f") == ["eval", "d.jsonl", "--seed=3", "--no-blind"]
