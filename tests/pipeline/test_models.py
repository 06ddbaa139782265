"""A model loaded with its tokenizer (pipeline.models): its name, device, dtype, vocabulary, context and decoder
layers; a weights fingerprint that names the weights, not their precision; and a model source refused in one line,
naming what is missing, before anything loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mia_fast import load_model
from mia_fast.errors import MiaFastError, one_line
from mia_fast.pipeline.models import cache_dir, check_model_source, load_tokenizer

pytestmark = pytest.mark.lower_bounds


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir))


def test_a_model_loads_with_its_name_device_dtype_and_shape(loaded, tiny_model_dir):
    assert loaded.name == str(tiny_model_dir)
    assert loaded.device == torch.device("cpu") and loaded.dtype == torch.float32
    assert next(loaded.model.parameters()).dtype == torch.float32 and not loaded.model.training
    assert loaded.vocab_size == len(loaded.tokenizer) == loaded.model.lm_head.weight.shape[0]
    assert loaded.context_length == 64


def test_a_dtype_named_is_the_models(tiny_model_dir):
    bf16 = load_model(str(tiny_model_dir), dtype="bf16")
    assert bf16.dtype == torch.bfloat16 and next(bf16.model.parameters()).dtype == torch.bfloat16


def test_the_decoder_layers_are_the_models_stack(loaded):
    layers = loaded.decoder_layers()
    assert layers is loaded.model.model.layers and len(layers) == 2


def test_a_llamas_head_is_plain(loaded):
    assert loaded.plain_linear_head() is loaded.model.lm_head


def test_the_weights_fingerprint_names_the_weights_whatever_their_precision(loaded, tiny_model_dir):
    fingerprint = loaded.weights_fingerprint()
    assert len(fingerprint) == 64 and fingerprint == loaded.weights_fingerprint()
    assert load_model(str(tiny_model_dir)).weights_fingerprint() == fingerprint
    assert load_model(str(tiny_model_dir), dtype="bf16").weights_fingerprint() == fingerprint


def test_the_weights_fingerprint_changes_when_a_weight_does(tiny_model_dir):
    changed = load_model(str(tiny_model_dir))
    before = changed.weights_fingerprint()
    with torch.no_grad():
        changed.model.lm_head.weight.view(-1)[0] += 1.0  # the first of each tensor is always sampled
    assert changed.weights_fingerprint() != before


def test_missing_model_fails_clearly(tmp_path):
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        load_model(str(tmp_path / "nowhere"))


def model_folder(tmp_path: Path, *files: str) -> str:
    folder = tmp_path / "model"
    folder.mkdir()
    for name in files:
        (folder / name).write_text(json.dumps({}))
    return str(folder)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ((), "has no config.json"),
        (("config.json",), r"has no weights \(model.safetensors or pytorch_model.bin\)$"),
        (("config.json", "m.gguf"), r"has no weights .*; to load its GGUF file, pass .*m.gguf itself"),
        (("config.json", "model.safetensors"), "has no tokenizer files"),
    ],
)
def test_a_model_directory_missing_a_part_is_refused_naming_it(tmp_path, files, expected):
    with pytest.raises(MiaFastError, match=expected):
        check_model_source(model_folder(tmp_path, *files))


def test_a_complete_model_directory_passes_the_check(tiny_model_dir, tmp_path):
    check_model_source(str(tiny_model_dir))
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    check_model_source(str(copy))


def test_a_missing_gguf_file_is_refused(tmp_path):
    with pytest.raises(MiaFastError, match="GGUF file not found: .*absent.gguf"):
        check_model_source(str(tmp_path / "absent.gguf"))


def test_a_file_that_is_no_model_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(MiaFastError, match="notes.txt: not a model directory"):
        check_model_source(str(tmp_path / "notes.txt"))


def test_the_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MIA_FAST_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("MIA_FAST_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "mia-fast"


def test_an_exceptions_message_is_one_line_cut_at_a_word():
    assert one_line(ValueError("first line\n  second   line")) == "first line second line"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(ValueError("alpha beta gamma delta"), limit=14) == "alpha beta …"
    assert one_line(ValueError("alpha beta gamma delta"), limit=11) == "alpha beta …"  # the cut at a word's end


def test_a_folder_of_tokenizer_files_alone_loads_its_tokenizer(tiny_model_dir, tmp_path):
    """What `freq build --tokenizer` and `freq info --tokenizer` name: a tokenizer needs no config or weights."""
    for part in tiny_model_dir.iterdir():
        if part.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(part, tmp_path / part.name)
    assert load_tokenizer(str(tmp_path)).get_vocab() == load_tokenizer(str(tiny_model_dir)).get_vocab()
