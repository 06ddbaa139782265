"""Which forward an engine runs (pipeline.forward_path): the packed decoder for every supported family on every
device (a GPU's choice checked here with a model said to be on CUDA: the choice is made before anything runs), the
model's own forward for the others and why, the path in a scores file's provenance and on --verbose; and the model's
own forward running long rows alone, with no padding mask."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import FAST, digests, fail, fail_writes, read_jsonl, run_cli, stand_in_gpu, write_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import Detector, ModelConfig
from mia_fast.data.artefacts import read_checked_json, write_checked_json
from mia_fast.data.outputs import MANIFEST_KIND, manifest_path, stage_path
from mia_fast.engines.batching import plan_batches
from mia_fast.errors import MiaFastError
from mia_fast.pipeline import engine as engine_module
from mia_fast.pipeline.device import Accelerator
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.models import LoadedModel, load_model
from pipeline.test_packed import ARCHITECTURES, tiny_decoder

CUDA = torch.device("cuda")
H100 = Accelerator("nvidia", "sm_90", native_bf16=True)


@pytest.fixture(autouse=True)
def claimed_gpu(monkeypatch):
    """CUDA is an H100 whose path is chosen without running anything there (no self-check: nothing runs on CUDA)."""
    stand_in_gpu(monkeypatch, H100, self_checks=False)


def claimed(model: torch.nn.Module, tokenizer, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """A model said to be on ``device``: the engine decides its path from that without running it."""
    return LoadedModel(model=model.to(dtype), tokenizer=tokenizer, name="tiny", device=device, dtype=dtype)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_model(str(tiny_model_dir)).tokenizer


@pytest.mark.parametrize("kind", sorted(ARCHITECTURES))
def test_on_a_gpu_every_supported_family_runs_packed_with_flash_attention_and_the_triton_head(kind, tokenizer):
    engine = StatsEngine(claimed(tiny_decoder(kind), tokenizer, CUDA, torch.bfloat16))
    assert engine.packs and engine.cache_settings()["packed"]
    assert engine.provenance()["forward"] == "packed, varlen attention (flash), Triton head"
    assert StatsEngine(
        claimed(tiny_decoder(kind), tokenizer, CUDA, torch.bfloat16), backend="torch"
    ).path.describe() == ("packed, varlen attention (flash), torch head")


def test_on_a_gpu_an_fp32_model_packs_with_the_segment_wise_attention_and_says_why(tokenizer):
    engine = StatsEngine(claimed(tiny_decoder("llama"), tokenizer, CUDA, torch.float32))
    assert engine.provenance()["forward"] == (
        "packed, segment-wise attention (flash attention takes fp16 or bf16, not float32), Triton head"
    )


@pytest.mark.parametrize(
    ("found", "forward"),
    [
        (Accelerator("nvidia", "sm_75"), "segment-wise attention (torch's flash kernel does not run sm_75), Triton"),
        (Accelerator("amd", "gfx942", native_bf16=True), "varlen attention (flash), Triton"),
        (
            Accelerator("amd", "gfx1100", native_bf16=True),
            "segment-wise attention (torch's flash kernel does not run gfx1100), torch",
        ),
    ],
)
def test_each_gpus_path_follows_its_row_and_says_why_in_the_path_line(found, forward, tokenizer, monkeypatch):
    stand_in_gpu(monkeypatch, found, self_checks=False)
    engine = StatsEngine(claimed(tiny_decoder("llama"), tokenizer, CUDA, torch.float16))
    assert engine.provenance()["forward"] == f"packed, {forward} head"


def test_on_a_cpu_the_packed_path_streams_its_head(tokenizer):
    engine = StatsEngine(claimed(tiny_decoder("gpt_neox"), tokenizer, torch.device("cpu"), torch.float32))
    assert engine.provenance()["forward"] == "packed, segment-wise attention, streamed head"


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=300, n_positions=64))


@pytest.mark.parametrize("device", [CUDA, torch.device("cpu")])
def test_another_family_keeps_its_own_forward_and_says_why(device, tokenizer):
    engine = StatsEngine(claimed(gpt2(), tokenizer, device, torch.bfloat16))
    assert not engine.packs and not engine.cache_settings()["packed"]
    head = "Triton head" if device.type == "cuda" else "torch head"
    assert engine.provenance()["forward"] == (
        f"the model's own forward, length-sorted padded rows (1024+ ids alone), {head} (not packed: model type "
        "'gpt2' is not one of gpt_neox, llama, mistral, qwen2)"
    )
    with pytest.raises(MiaFastError, match="cannot run this model packed: model type 'gpt2'"):
        StatsEngine(claimed(gpt2(), tokenizer, device, torch.bfloat16), forward="packed")


def test_the_models_own_forward_when_asked_for_or_when_the_head_is_not_plain(tokenizer):
    asked = StatsEngine(claimed(tiny_decoder("qwen2"), tokenizer, CUDA, torch.bfloat16), forward="model")
    assert not asked.packs and "(not packed: the model's own forward was asked for)" in asked.path.describe()
    logits = StatsEngine(claimed(tiny_decoder("llama"), tokenizer, CUDA, torch.bfloat16), use_hidden_states=False)
    assert logits.path.describe().endswith(
        "the model's logits, Triton statistics (not packed: its output head is not a plain linear layer)"
    )
    asked.use_forward("auto")
    assert asked.packs
    with pytest.raises(MiaFastError, match="unknown forward 'fast'"):
        asked.use_forward("fast")


def test_scores_record_their_path_and_verbose_says_it(tiny_model_dir, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": "the quick brown fox"}, {"text": "jumps over the dog"}])
    out = tmp_path / "out.jsonl"
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", out, "--verbose", *FAST) == 0
    assert "packed, segment-wise attention, streamed head" in capsys.readouterr().err
    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["engines"]["target"]["forward"] == "packed, segment-wise attention, streamed head"
    model_out = tmp_path / "model.jsonl"
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", model_out, "--forward", "model", *FAST) == 0
    assert "not packed" not in capsys.readouterr().err  # said with --verbose only
    for ours, theirs in zip(read_jsonl(out), read_jsonl(model_out)):
        np.testing.assert_allclose(ours["loss"], theirs["loss"], rtol=1e-5)


def interrupt(data, model, out, monkeypatch, *extra) -> None:
    """A run of ``out`` stopped by a full disk after its first blocks: OUT.partial/ holds them."""
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=2)
        assert run_cli("score", data, "--model", model, "--out", out, "--block-rows", "2", *FAST, *extra) == 2


def test_a_stage_written_before_paths_were_recorded_resumes_and_another_path_is_refused(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": f"text number {i} of a few"} for i in range(6)])
    fresh, out = tmp_path / "fresh.jsonl", tmp_path / "out.jsonl"
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", fresh, "--block-rows", "2", *FAST) == 0
    interrupt(data, tiny_model_dir, out, monkeypatch)
    staged = stage_path(out) / "manifest.json"
    manifest = read_checked_json(staged, MANIFEST_KIND, "a scoring run")
    del manifest["engines"]["target"]["forward"]  # as an earlier version wrote it
    write_checked_json(staged, manifest, MANIFEST_KIND)
    capsys.readouterr()
    assert run_cli("score", data, "--model", tiny_model_dir, "--out", out, "--resume", *FAST) == 0
    assert out.read_bytes() == fresh.read_bytes()

    other = tmp_path / "other.jsonl"
    interrupt(data, tiny_model_dir, other, monkeypatch)
    before = digests(stage_path(other))
    command = ["score", data, "--model", tiny_model_dir, "--out", other, "--resume", "--forward", "model", *FAST]
    line = fail(capsys, *command)
    assert "scored with another target model setting (forward: 'packed, segme...' before, now" in line
    assert digests(stage_path(other)) == before


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 300), max_size=30), budget=st.integers(1, 1000), alone=st.integers(1, 300))
def test_rows_at_least_alone_from_long_run_alone(lengths, budget, alone):
    batches = plan_batches(lengths, budget, alone_from=alone)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) == 1 or max(lengths[i] for i in batch) < alone
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= budget


def test_the_models_own_forward_runs_a_long_row_without_a_mask(tiny_model_dir, monkeypatch):
    texts = ["a b c d e f g h i j k l m n o p q r s t u v w x y z " * 2, "short one", "another short one"]
    detector = Detector(ModelConfig(str(tiny_model_dir), forward="model"))
    engine = detector.target
    masks: list = []
    base = engine.loaded.model.base_model
    forward = base.forward
    monkeypatch.setattr(base, "forward", lambda **kw: masks.append(kw["attention_mask"]) or forward(**kw))
    monkeypatch.setattr(engine_module, "ALONE_FROM", 20)
    engine.batch_tokens = 1000
    alone = engine.compute(texts)
    long_rows = sum(len(row.ids) >= 20 for row in engine.rows(texts, None))
    assert long_rows >= 2 and masks[:long_rows] == [None] * long_rows  # each long row (window) alone, unmasked
    assert len(masks) == long_rows + 1 and masks[-1] is not None  # the short ones padded together
    monkeypatch.setattr(engine_module, "ALONE_FROM", 10_000)
    masks.clear()
    together = engine.compute(texts)
    assert len(masks) == 1 and masks[0] is not None
    np.testing.assert_allclose(alone.logp, together.logp, rtol=1e-5, atol=1e-5)


def test_a_cpu_keeps_a_16_bit_models_residual_in_fp32_and_a_gpu_in_its_own_dtype(tokenizer):
    cpu = torch.device("cpu")
    wide = StatsEngine(claimed(tiny_decoder("llama"), tokenizer, cpu, torch.bfloat16))
    assert wide.path.describe() == "packed, segment-wise attention, streamed head, fp32 residual"
    assert wide.cache_settings()["residual"] == "fp32" and wide.packed_decoder().residual_dtype == torch.float32
    for engine in (
        StatsEngine(claimed(tiny_decoder("llama"), tokenizer, cpu, torch.float32)),
        StatsEngine(claimed(tiny_decoder("llama"), tokenizer, CUDA, torch.bfloat16)),
    ):
        assert "residual" not in engine.path.describe() and "residual" not in engine.cache_settings()
