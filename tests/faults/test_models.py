"""Models that cannot load, a device this machine lacks, texts no tokenizer accepts: each refused in one line, early,
or (texts given through the API) cleaned with a warning."""

import re
import shutil
import socket
import time

import numpy as np
import pytest
import torch
from helpers import refused, write_jsonl

from mia_fast import Detector
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.pipeline.models import check_device, check_model_source

TOKENIZER_ADVICE = "(tokenizer.json, or tokenizer_config.json and its vocabulary); copy them beside the weights"


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "in" / "d.jsonl", [{"text": "the rain in spain"}])


def score_refused(capsys, tmp_path, data, *args) -> str:
    return refused(capsys, "score", data, *args, "--out", tmp_path / "out" / "s.jsonl", "--quiet", keep=[tmp_path])


@pytest.mark.parametrize("flag", ["--model", "--ref-model"])
@pytest.mark.parametrize("given", ["./no/such/dir", "no/such/dir", "{tmp}/nothere", "~/no-such-model-dir/"])
def test_a_missing_model_directory_is_named(flag, given, tiny_model_dir, tmp_path, data, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = given.format(tmp=tmp_path)
    target = ["--model", tiny_model_dir, "--methods", "ref"] if flag == "--ref-model" else []
    line = score_refused(capsys, tmp_path, data, *target, flag, path)
    assert line == f"mia-fast: error: {path}: no such model directory"


def test_a_missing_gguf_file_is_named(tmp_path, data, capsys):
    line = score_refused(capsys, tmp_path, data, "--gguf", tmp_path / "nothere.gguf")
    assert line == f"mia-fast: error: GGUF file not found: {tmp_path / 'nothere.gguf'}"


@pytest.mark.parametrize(
    ("removed", "missing"),
    [
        (("tokenizer.json", "tokenizer_config.json"), f"no tokenizer files {TOKENIZER_ADVICE}"),
        (("tokenizer.json",), f"no tokenizer files {TOKENIZER_ADVICE}"),
        (("model.safetensors",), "no weights (model.safetensors or pytorch_model.bin)"),
        (
            ("config.json",),
            "no config.json; a model directory holds config.json, the weights and the tokenizer files, "
            "as save_pretrained writes them",
        ),
    ],
)
def test_a_model_directory_missing_a_part_says_which(removed, missing, tiny_model_dir, tmp_path, data, capsys):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    for name in removed:
        (model / name).unlink()
    line = score_refused(capsys, tmp_path, data, "--model", model)
    assert line == f"mia-fast: error: {model} has {missing}"


def test_check_model_source_refuses_without_loading(tiny_model_dir, tmp_path):
    check_model_source(str(tiny_model_dir))
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        check_model_source(str(tmp_path / "nowhere"))
    bare = shutil.copytree(tiny_model_dir, tmp_path / "bare", ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(MiaFastError, match="bare has no tokenizer files"):
        check_model_source(str(bare))
    with pytest.raises(MiaFastError, match="GGUF file not found"):
        check_model_source(gguf=tmp_path / "nothere.gguf")


def write_gguf(path):
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_truncated_gguf_file_is_refused_before_transformers_reads_it(tmp_path, data, capsys, monkeypatch):
    pytest.importorskip("gguf")
    monkeypatch.setenv("MIA_FAST_CACHE", str(tmp_path / "cache"))
    cut = write_gguf(tmp_path / "cut.gguf")
    with open(cut, "r+b") as f:
        f.truncate(cut.stat().st_size - 1024)
    size = cut.stat().st_size
    line = score_refused(capsys, tmp_path, data, "--gguf", cut)
    assert line == (
        f"mia-fast: error: {cut}: truncated or corrupt GGUF file ({size:,} bytes; "
        "cannot reshape array of size 1792 into shape (64,32))"
    )
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip file")
    line = score_refused(capsys, tmp_path, data, "--model", not_gguf)
    assert line == f"mia-fast: error: {not_gguf}: not a GGUF file (it does not start with the bytes GGUF)"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_hub_is_said_once_and_at_once(tmp_path, data, capsys, monkeypatch):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    began = time.monotonic()
    line = score_refused(capsys, tmp_path, data, "--model", "nobody/no-such-model")
    assert time.monotonic() - began < 5
    assert line == (
        "mia-fast: error: model 'nobody/no-such-model' is not a local directory or in the Hugging Face cache, "
        f"and the hub ({endpoint}) cannot be reached; download it where there is a connection and pass its directory"
    )


def test_an_uncached_hub_model_offline_is_refused_without_trying(tmp_path, data, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    line = score_refused(capsys, tmp_path, data, "--model", "nobody/no-such-model")
    assert line == (
        "mia-fast: error: model 'nobody/no-such-model' is not a local directory or in the Hugging Face cache, "
        "and HF_HUB_OFFLINE is set; download it where there is a connection and pass its directory"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused_before_anything_is_read(tmp_path, data, capsys):
    line = score_refused(capsys, tmp_path, data, "--model", tmp_path / "never-read", "--device", "cuda")
    assert line == "mia-fast: error: device 'cuda' was asked for but CUDA is not available on this machine"


def test_check_device_refuses_without_loading():
    check_device("cpu", "fp32")
    with pytest.raises(MiaFastError, match="unknown device 'gpu0'"):
        check_device("gpu0")
    with pytest.raises(MiaFastError, match="unknown dtype 'fp8'; choose one of fp32, bf16, fp16"):
        check_device("cpu", "fp8")
    absent = f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(MiaFastError, match=f"device '{absent}' was asked for but"):
        check_device(absent)


def test_lone_surrogates_given_through_the_api_are_replaced_with_a_warning(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    with pytest.warns(MiaFastWarning, match=r"the text 'a\ufffdb in spain' had 1 lone surrogate\(s\)"):
        scores = detector.score(["a\ud800b in spain", "the rain in spain"], k=[0.2])
    assert all(np.isfinite(values).all() for values in scores.values())
    assert scores["loss"][0] == detector.score(["a\ufffdb in spain"], methods=["loss"])["loss"][0]


@pytest.mark.parametrize("forward", ["packed", "model"])
def test_a_model_whose_vocabulary_is_smaller_than_its_tokenizers_is_refused(forward, tmp_path, data, capsys):
    """It used to end in IndexError: index out of range in self, on both forwards."""
    from conftest import train_tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"}, vocab_size=300)
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model_dir = tmp_path / "small-vocabulary"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    line = score_refused(capsys, tmp_path, data, "--model", model_dir, "--forward", forward, "--methods", "loss")
    assert f"{model_dir}: its tokenizer gives ids up to 299, but the model's embedding has 100 rows" in line, line


def _tampered_copy(source, target, tensors=None, config=None):
    """A copy of a model directory whose checkpoint holds ``tensors(state)`` and whose config.json is updated with
    ``config``."""
    import json

    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    if tensors is not None:
        state = load_file(target / "model.safetensors")
        save_file(tensors(state), target / "model.safetensors", metadata={"format": "pt"})
    if config is not None:
        settings = json.loads((target / "config.json").read_text())
        (target / "config.json").write_text(json.dumps(settings | config))
    return target


@pytest.mark.parametrize(
    ("tampering", "said"),
    [
        (
            {"tensors": lambda state: {key.replace("model.", "transformer."): v for key, v in state.items()}},
            r"config.json describes a 'llama' model \(LlamaForCausalLM\), but 2\d weights it needs are not in the "
            r"checkpoint \(model.embed_tokens.weight, model.layers.0.input_layernorm.weight, "
            r"model.layers.0.mlp.down_proj.weight, ...\) and 2\d tensors of the checkpoint are not used "
            r"\(transformer.embed_tokens.weight, .*\); its scores would not be this checkpoint's",
        ),
        (
            {"tensors": lambda state: {k: v for k, v in state.items() if ".layers.1." not in k}},
            r"but 9 weights it needs are not in the checkpoint \(model.layers.1.input_layernorm.weight, ",
        ),
        ({"config": {"num_hidden_layers": 1}}, r"but 9 tensors of the checkpoint are not used \(model.layers.1."),
        (
            {"tensors": lambda state: {k: v for k, v in state.items() if k != "lm_head.weight"}},
            r"but 1 weights it needs are not in the checkpoint \(lm_head.weight\)",
        ),
        (
            {"config": {"intermediate_size": 96}},
            r"the checkpoint's model.layers.0.mlp.down_proj.weight is \[32, 64\] \(and 5 more tensors\), where "
            r"config.json describes a 'llama' model \(LlamaForCausalLM\) that needs \[32, 96\]: config.json does not "
            r"fit these weights",
        ),
    ],
    ids=["renamed keys", "a missing shard's tensors", "fewer layers", "untied head missing", "shapes"],
)
@pytest.mark.parametrize("forward", ["packed", "model"])
def test_a_checkpoint_that_does_not_fill_the_model_is_refused(
    tampering, said, forward, tiny_model_dir, tmp_path, data, capsys
):
    """transformers fills what a checkpoint lacks with random values, and scored from them without a word."""
    model_dir = _tampered_copy(tiny_model_dir, tmp_path / "tampered", **tampering)
    line = score_refused(capsys, tmp_path, data, "--model", model_dir, "--forward", forward, "--methods", "loss")
    assert line.startswith(f"mia-fast: error: {model_dir}: ")
    assert re.search(said, line), line


def test_a_gpt_neox_checkpoint_whose_config_says_llama_is_refused(tmp_path, data, capsys):
    """The case that scored with random weights: two runs of one folder differed by 1.72 in loss."""
    import json

    from conftest import train_tokenizer
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"})
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4
    )
    model_dir = tmp_path / "neox"
    GPTNeoXForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    settings = json.loads((model_dir / "config.json").read_text())
    settings |= {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    (model_dir / "config.json").write_text(json.dumps(settings))
    line = score_refused(capsys, tmp_path, data, "--model", model_dir, "--methods", "loss")
    assert "config.json describes a 'llama' model (LlamaForCausalLM), but " in line, line
    assert "weights it needs are not in the checkpoint (lm_head.weight, model.embed_tokens.weight" in line
    assert "tensors of the checkpoint are not used (embed_out.weight, gpt_neox.embed_in.weight" in line


def test_a_tied_head_is_no_missing_weight(tmp_path, data):
    from conftest import save_tiny_llama, train_tokenizer
    from safetensors import safe_open

    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"})
    model_dir = save_tiny_llama(tmp_path / "tied", tokenizer, seed=3, tie_word_embeddings=True)
    with safe_open(model_dir / "model.safetensors", "pt") as checkpoint:
        assert "lm_head.weight" not in checkpoint.keys()
    assert np.isfinite(Detector(str(model_dir)).score(["the rain in spain"], methods=["loss"])["loss"]).all()


def test_a_weights_file_the_user_cannot_read_is_named_as_such(tiny_model_dir, tmp_path, data, capsys, monkeypatch):
    """It was "No such file or directory". Tests run as root, whom no mode stops: the check's own question is
    answered no for the weights."""
    import os

    model_dir = shutil.copytree(tiny_model_dir, tmp_path / "model")
    weights = model_dir / "model.safetensors"
    weights.chmod(0o000)
    can_read = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: can_read(path, mode) and os.stat(path).st_mode & 0o444 != 0)
    line = score_refused(capsys, tmp_path, data, "--model", model_dir)
    assert line == f"mia-fast: error: {weights}: permission denied (this user cannot read it)"
