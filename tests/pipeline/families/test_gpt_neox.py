"""gpt_neox's spec (pipeline.families.gpt_neox): its layer gathers each head's q, k and v (q and k paired when
reordered), its parallel residual as the config says, and the activations it refuses."""

from __future__ import annotations

import pytest
import torch
import transformers

from mia_fast.pipeline.families import family_of
from mia_fast.pipeline.families.gpt_neox import GPT_NEOX, neox_layer
from mia_fast.pipeline.packed_layers import HeadShape

pytestmark = pytest.mark.lower_bounds

CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tiny_neox(**extra) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        rotary_pct=0.5,
        **extra,
    )
    return transformers.GPTNeoXForCausalLM(config).eval()


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("reorder", [False, True])
def test_a_neox_layer_gathers_each_heads_q_k_and_v_with_q_and_k_paired_when_reordered(reorder, parallel):
    model = tiny_neox(use_parallel_residual=parallel)
    layer, shape = model.gpt_neox.layers[0], HeadShape(heads=4, kv_heads=4, head_dim=8, rotary_dims=4)
    packed, x = neox_layer(layer, shape, model.config, reorder=reorder), random(5, 32, seed=1)
    within = shape.paired(1) if reorder else torch.arange(8)
    with torch.no_grad():
        q, k, v = packed.qkv(x)
        heads = layer.attention.query_key_value(x).view(5, 4, 3, 8)
        torch.testing.assert_close(q, heads[:, :, 0, within], **CLOSE)
        torch.testing.assert_close(k, heads[:, :, 1, within], **CLOSE)
        torch.testing.assert_close(v, heads[:, :, 2], **CLOSE)
        torch.testing.assert_close(packed.mlp.added_to(x, torch.zeros(5, 32)), layer.mlp(x), **CLOSE)
        torch.testing.assert_close(packed.post_norm(x), layer.post_attention_layernorm(x), **CLOSE)
    assert packed.parallel == parallel and packed.mlp.gate is None


def test_it_reads_the_models_own_modules_by_their_names():
    base = tiny_neox().base_model
    assert family_of("gpt_neox") is GPT_NEOX
    for name in (GPT_NEOX.embedding, GPT_NEOX.final_norm, GPT_NEOX.rotary):
        assert isinstance(getattr(base, name), torch.nn.Module)
    assert GPT_NEOX.window(tiny_neox().config, 0) is None


def test_it_refuses_an_activation_it_has_no_formula_for():
    assert "relu" in GPT_NEOX.refuses(transformers.GPTNeoXConfig(hidden_act="relu"), 64)
    assert GPT_NEOX.refuses(transformers.GPTNeoXConfig(hidden_act="gelu_new"), 64) is None
