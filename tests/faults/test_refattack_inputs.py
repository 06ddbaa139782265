"""EZ-MIA and WBC's bad inputs, each refused in one line with nothing written: no reference model (before any model
loads), a served target whose tokens cannot be placed in the text (before connecting), bad window sizes (as the option
is parsed), and two tokenizers none of whose tokens cover the same characters (before anything is written)."""

import re

import pytest
from conftest import save_tiny_llama
from helpers import refused, write_jsonl

METHODS = ["ezmia", "wbc"]


@pytest.fixture
def data(tmp_path):
    return write_jsonl(
        tmp_path / "in" / "d.jsonl", [{"text": "the rain in spain"}, {"text": "all that glitters is not gold"}]
    )


@pytest.fixture(scope="module")
def unalignable_dir(tmp_path_factory):
    """A tiny model whose tokens are whole words with the space after them: never the characters of a byte-level BPE
    token, which carries the space before its word."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = "the rain in spain all that glitters is not gold".split()
    tokens = ["<unk>", "<bos>", "<eos>", "<pad>", *words, *(word + " " for word in words)]
    vocabulary = {token: i for i, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    return save_tiny_llama(tmp_path_factory.mktemp("unalignable"), tokenizer, seed=3, hidden=16, layers=1)


def score_refused(capsys, tmp_path, data, *args) -> str:
    return refused(capsys, "score", data, *args, "--out", tmp_path / "out" / "s.jsonl", "--quiet", keep=[tmp_path])


@pytest.mark.parametrize("method", METHODS)
def test_no_reference_model_is_refused_before_any_model_loads(method, tmp_path, data, capsys):
    line = score_refused(capsys, tmp_path, data, "--model", tmp_path / "no-such-model", "--methods", method)
    assert line == f"mia-fast: error: method {method!r} needs a reference model (--ref-model)"


@pytest.mark.parametrize("method", METHODS)
def test_a_served_target_without_its_tokenizer_is_refused_before_connecting(
    method, tmp_path, data, tiny_model_dir, capsys
):
    server = ["--server", "http://127.0.0.1:1", "--server-model", "m"]
    line = score_refused(capsys, tmp_path, data, *server, "--ref-model", tiny_model_dir, "--methods", method)
    assert line == (
        f"mia-fast: error: method {method!r} needs the character spans of the served tokens, to align them with the "
        "reference's: give --tokenizer NAME"
    )


@pytest.mark.parametrize("windows", ["0", "5,x", ","])
def test_bad_window_sizes_are_refused_as_parsed(windows, tmp_path, data, tiny_model_dir, capsys):
    model = ["--model", tiny_model_dir, "--ref-model", tiny_model_dir]
    line = score_refused(capsys, tmp_path, data, *model, "--methods", "wbc", "--wbc-windows", windows)
    assert "--wbc-windows" in line


@pytest.mark.parametrize("method", METHODS)
def test_tokenizers_that_cannot_be_aligned_are_refused_with_nothing_written(
    method, tmp_path, data, tiny_model_dir, unalignable_dir, capsys
):
    model = ["--model", tiny_model_dir, "--ref-model", unalignable_dir]
    line = score_refused(capsys, tmp_path, data, *model, "--methods", f"loss,{method}")
    assert re.fullmatch(
        f"mia-fast: error: {method}: none of the target's \\d+ scored tokens covers the same characters as a token of "
        "the reference model: their tokenizers split text too differently to align; use a reference model whose "
        "tokenizer splits text like the target's",
        line,
    ), line
