"""Declaring options: the argparse types refuse a bad value as it is parsed (one line each), the shared groups
declare what each command takes, and the input the options name is read or refused before any model loads."""

from __future__ import annotations

import argparse

import pytest
from helpers import parsed, write_jsonl

from mia_fast.cli.options import (
    add_device_options,
    add_model_options,
    add_overwrite_and_quiet,
    add_scoring_options,
    bounded,
    bounded_list,
    checked,
    load_input,
    method_list,
    setting_parser,
)
from mia_fast.data import DataStream
from mia_fast.errors import MiaFastError
from mia_fast.methods.setting_options import setting_options
from mia_fast.methods.settings import Range


def test_a_bounded_number_is_parsed_or_refused_with_its_range():
    whole = bounded(Range(1, 10, whole=True))
    assert whole("7") == 7
    for text in ("0", "11", "2.5", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            whole(text)


def test_a_bounded_list_takes_comma_separated_numbers_each_in_range():
    fractions = bounded_list(Range(0, 1))
    assert fractions("0.1, 0.5,,1") == [0.1, 0.5, 1]
    for text in ("", ",", "0.1,2", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError, match="comma-separated numbers"):
            fractions(text)


def test_checked_gives_back_the_text_or_the_checks_one_line():
    def refuse_x(text: str) -> None:
        if "x" in text:
            raise MiaFastError("no x, please")

    parse = checked(refuse_x)
    assert parse("abc") == "abc"
    with pytest.raises(argparse.ArgumentTypeError, match="^no x, please$"):
        parse("xyz")


def test_a_method_list_names_registered_methods_only():
    assert method_list("loss,mink_0.2") == "loss,mink_0.2"
    with pytest.raises(argparse.ArgumentTypeError):
        method_list("loss,no_such_method")


def test_a_settings_flag_is_parsed_by_its_own_parser_else_its_range_else_its_defaults_type():
    for option in setting_options():
        parse = setting_parser(option)
        if option.flag.parse is not None:
            assert parse is option.flag.parse
        elif option.spec.bounds is not None:
            with pytest.raises(argparse.ArgumentTypeError):
                parse("not a number")
        elif isinstance(option.default, (int, float)) and not isinstance(option.default, bool):
            assert parse is type(option.default)
        else:
            assert parse is None


def test_the_model_group_leaves_out_the_reference_where_asked():
    with_reference, without = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_model_options(with_reference)
    add_model_options(without, reference=False)
    assert with_reference.parse_args(["--ref-model", "r", "--dtype", "bf16"]).ref_model == "r"
    assert "ref_model" not in vars(without.parse_args([]))


def test_device_options_go_to_the_group_given():
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("models")
    add_device_options(group)
    assert [a.dest for a in group._group_actions] == ["device", "device_map", "dtype"]
    assert vars(parser.parse_args(["--device", "cpu"])) == {"device": "cpu", "device_map": None, "dtype": None}
    assert parser.parse_args(["--device-map", "auto"]).device_map == "auto"
    with pytest.raises(SystemExit):
        parser.parse_args(["--dtype", "fp8"])


def test_a_command_that_runs_its_model_whole_takes_no_device_map():
    parser = argparse.ArgumentParser()
    add_device_options(parser.add_argument_group("model"), spread=False)
    assert vars(parser.parse_args([])) == {"device": None, "dtype": None}


def test_overwrite_and_quiet_are_off_unless_given():
    parser = argparse.ArgumentParser()
    add_overwrite_and_quiet(parser, "replace it")
    assert vars(parser.parse_args([])) == {"overwrite": False, "quiet": False}
    assert vars(parser.parse_args(["--overwrite", "--quiet"])) == {"overwrite": True, "quiet": True}
    assert next(a.help for a in parser._actions if a.dest == "overwrite") == "replace it"


def test_scoring_options_without_methods_keep_the_settings_and_the_output_group():
    parser = argparse.ArgumentParser()
    add_scoring_options(parser, methods=False)
    args = parser.parse_args(["--stats-cache", "c", "--no-prepend-start"])
    assert not hasattr(args, "methods") and not hasattr(args, "k")
    assert args.stats_cache == "c" and args.prepend_start is False and args.block_rows > 0
    assert {option.key for option in setting_options()} <= set(vars(args))


def test_the_input_is_refused_before_it_is_read_where_the_options_disagree(tmp_path):
    data = str(write_jsonl(tmp_path / "d.jsonl", [{"text": "a b c", "label": 1}]))
    for argv, line in [
        (["score", "--out", "o.jsonl"], "give DATA (a file of texts) or --suite NAME"),
        (["score", data, "--split", "x", "--out", "o.jsonl"], "--split and --config select within a --suite"),
        (
            ["score", data, "--neighbor-field", "n", "--neighbor-model", "word-drop", "--out", "o.jsonl"],
            "give --neighbor-field or --neighbor-model, not both",
        ),
    ]:
        with pytest.raises(MiaFastError, match=line.replace("(", r"\(").replace(")", r"\)")):
            load_input(parsed(argv))


def test_a_data_file_is_streamed_where_asked_and_cut_to_max_words(tmp_path):
    data = str(write_jsonl(tmp_path / "d.jsonl", [{"text": "one two three four", "label": 1}]))
    assert isinstance(load_input(parsed(["score", data, "--out", "o.jsonl"]), stream=True), DataStream)
    dataset = load_input(parsed(["score", data, "--max-words", "2", "--out", "o.jsonl"]))
    assert list(dataset.texts) == ["one two"]
