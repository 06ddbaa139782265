"""The checks a loaded model passes before it scores, on hand-built loading reports: every refusal one line naming
the first tensors, the count and what config.json says the model is."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mia_fast.errors import MiaFastError
from mia_fast.pipeline.model_checks import check_checkpoint, check_vocabulary


@pytest.fixture(scope="module")
def model():
    config = LlamaConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    return LlamaForCausalLM(config)


def report(missing=(), unexpected=(), mismatched=()):
    return {"missing_keys": set(missing), "unexpected_keys": set(unexpected), "mismatched_keys": set(mismatched)}


def test_a_checkpoint_that_fills_the_model_passes(model):
    check_checkpoint(model, report(), "m")
    check_checkpoint(model, {}, "m")  # an older transformers' report without the keys


def test_missing_and_unused_tensors_are_counted_and_the_first_three_named(model):
    missing = [f"model.layers.{i}.w" for i in range(5)]
    with pytest.raises(MiaFastError) as refused:
        check_checkpoint(model, report(missing, ["x.b", "x.a"]), "m")
    assert str(refused.value) == (
        "m: config.json describes a 'llama' model (LlamaForCausalLM), but 5 weights it needs are not in the checkpoint "
        "(model.layers.0.w, model.layers.1.w, model.layers.2.w, ...) and 2 tensors of the checkpoint are not used "
        "(x.a, x.b); its scores would not be this checkpoint's (is config.json the one saved with these weights?)"
    )


def test_unused_tensors_may_be_allowed_missing_weights_never(model):
    check_checkpoint(model, report(unexpected=["cls.seq_relationship.weight"]), "m", unused_allowed=True)
    with pytest.raises(MiaFastError, match=r"but 1 weights it needs are not in the checkpoint \(lm_head.weight\);"):
        check_checkpoint(model, report(["lm_head.weight"], ["cls.x"]), "m", unused_allowed=True)


def test_a_shape_that_disagrees_is_said_first(model):
    mismatched = [("b.weight", torch.Size([2, 3]), torch.Size([2, 4])), ("a.weight", torch.Size([8]), torch.Size([9]))]
    with pytest.raises(MiaFastError) as refused:
        check_checkpoint(model, report(["c"], mismatched=mismatched), "m")
    assert str(refused.value) == (
        "m: the checkpoint's a.weight is [8] (and 1 more tensors), where config.json describes a 'llama' model "
        "(LlamaForCausalLM) that needs [9]: config.json does not fit these weights"
    )


def test_a_tokenizer_past_the_embedding_is_refused(model):
    class Tokenizer:
        vocab_size = 51

    with pytest.raises(
        MiaFastError, match=r"m: its tokenizer gives ids up to 50, but the model's embedding has 50 rows"
    ):
        check_vocabulary(Tokenizer(), model, "m")
    Tokenizer.vocab_size = 50
    check_vocabulary(Tokenizer(), model, "m")
