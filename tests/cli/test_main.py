"""The ``mia-fast`` entry point: --version, the parser of the chosen command alone, the one-line printer that masks
secrets, and OSError lines."""

import errno
import os
import signal
import time

import pytest

from mia_fast.cli import main
from mia_fast.cli.main import _printer, _sigterm_as_interrupt, build_parser, os_error_line
from mia_fast.errors import MiaFastError


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("mia-fast 0.")


def test_only_the_chosen_commands_options_are_declared():
    with_score = build_parser(["score"])
    assert with_score.parse_args(["score", "d.jsonl", "--out", "o.jsonl"]).out == "o.jsonl"
    with pytest.raises(MiaFastError, match="unrecognized arguments: d.jsonl --out o.jsonl"):
        build_parser([]).parse_args(["score", "d.jsonl", "--out", "o.jsonl"])


def test_a_bad_option_is_one_line(capsys):
    assert main(["score", "d.jsonl", "--out", "o.jsonl", "--block-rows", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mia-fast: error: mia-fast score: argument --block-rows: ")


def test_printed_lines_hide_the_key_and_a_urls_secrets(monkeypatch, capsys):
    monkeypatch.setenv("MY_KEY", "sk-do-not-show")
    show = _printer(["eval", "--api-key-env", "MY_KEY"])
    show("error", "refused sk-do-not-show by http://user:pw@host:8000/v1?token=abc")
    line = capsys.readouterr().err
    assert line.startswith("mia-fast: error: refused ") and line.count("\n") == 1
    assert "sk-do-not-show" not in line and "pw" not in line and "abc" not in line


def test_an_os_error_is_its_file_and_reason():
    assert os_error_line(OSError(errno.ENOSPC, "No space left on device", "out.jsonl")) == (
        "out.jsonl: No space left on device"
    )
    assert os_error_line(OSError("plain")) == "plain"


def test_sigterm_unwinds_as_an_interrupt_and_the_handler_is_put_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), _sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == before
