"""The decoders sampling steps through (pipeline.decoding): packed decoding gives the model's own logits at every
step, rows dropped on the way, and in bf16 stays closer to fp32 than the model's own bf16 decoding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from mia_fast.pipeline import decoding as decoding_module
from mia_fast.pipeline.attention import plain_attention_with_lse
from mia_fast.pipeline.decoding import ModelDecoding, PackedDecoding
from mia_fast.pipeline.packed import PackedDecoder
from pipeline.test_sampling import random_prompts, tiny


@pytest.fixture(scope="module")
def llama() -> torch.nn.Module:
    return tiny("llama")


@pytest.mark.parametrize("layout", ["reordered", "a GPU's: own weights, attention in plain products"])
def test_packed_decoding_gives_the_models_logits_at_every_step(llama, layout, monkeypatch):
    prompts, _ = random_prompts([3, 7, 12], samples=1)
    samples = [2, 3, 1]  # rows 0-1 follow prompt 0, rows 2-4 prompt 1, row 5 prompt 2
    by_model = ModelDecoding(llama, prompts, samples, 12 + 6)
    reorder = layout == "reordered"
    if not reorder:
        monkeypatch.setattr(decoding_module, "attention_with_lse", plain_attention_with_lse)
    packed = PackedDecoding(PackedDecoder(llama, reorder=reorder), prompts, samples, 6)
    logits = by_model.logits
    torch.testing.assert_close(packed.logits, logits, rtol=0, atol=1e-5)
    for step in range(5):
        tokens = logits.argmax(-1)
        if step == 2:  # prompt 2 loses its only row, prompts 0 and 1 one row each
            keep = torch.tensor([1, 3, 4])
            by_model.keep_rows(keep)
            packed.keep_rows(keep)
            tokens = tokens[keep]
        logits = by_model.step(tokens)
        torch.testing.assert_close(packed.step(tokens), logits, rtol=0, atol=1e-5)
    assert len(packed.prompt_bias) == 2


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_packed_bf16_decoding_is_closer_to_fp32_than_the_models_own_bf16_decoding(kind):
    model = tiny(kind)
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    packed_decoder = PackedDecoder(bf16)
    deviations: dict[str, list[float]] = {"own": [], "packed": []}
    for seed in (1, 2):
        prompts, _ = random_prompts([3, 7, 12], samples=1, seed=seed)
        samples, steps = [2, 2, 2], 8
        with torch.inference_mode():
            fp32 = ModelDecoding(model, prompts, samples, 12 + steps)
            decodings = {"own": ModelDecoding(bf16, prompts, samples, 12 + steps)}
            decodings["packed"] = PackedDecoding(packed_decoder, prompts, samples, steps)
            logits = {name: decoding.logits for name, decoding in decodings.items()}
            truth = fp32.logits
            for _ in range(steps):  # every decoding fed the tokens fp32 picks
                for name, values in logits.items():
                    gap = values.float().log_softmax(-1) - truth.log_softmax(-1)
                    deviations[name].append(gap.abs().max().item())
                tokens = truth.argmax(-1)
                truth = fp32.step(tokens)
                logits = {name: decoding.step(tokens) for name, decoding in decodings.items()}
    assert np.mean(deviations["packed"]) < np.mean(deviations["own"])
