"""The output gate fed from parsed options: every option naming a path the command reads is an input, and an output
that would destroy one is refused before any work."""

from __future__ import annotations

import argparse

import pytest

from mia_fast.cli.paths import check_command_outputs, command_inputs
from mia_fast.data.gate import Output
from mia_fast.errors import MiaFastError


def test_the_inputs_are_every_path_option_given_lists_included_and_settings_that_read_files():
    args = argparse.Namespace(data="d.jsonl", sources=["a.txt", "b.txt"], model=None, threshold="", out="o.jsonl")
    args.prefix_nonmembers = "known.txt"
    assert command_inputs(args) == ["d.jsonl", "a.txt", "b.txt", "known.txt"]


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a"}\n')
    args = argparse.Namespace(data=str(data), overwrite=True, resume=False)
    with pytest.raises(MiaFastError):
        check_command_outputs(args, Output(data))
    assert data.read_text() == '{"text": "a"}\n'
    check_command_outputs(args, Output(tmp_path / "scores.jsonl"))


def test_resume_and_overwrite_are_read_from_the_options():
    args = argparse.Namespace(overwrite=True, resume=True)
    with pytest.raises(MiaFastError, match="--resume and --overwrite exclude each other"):
        check_command_outputs(args, Output("o.jsonl", resumable=True))
