"""The Llama family's spec (pipeline.families.llama): its layer holds the model's own products (q and k paired when
reordered), which layers attend through a sliding window (Mistral's every layer, Qwen2's by its layer kinds), and
what it refuses."""

from __future__ import annotations

import pytest
import torch
import transformers

from mia_fast.pipeline.families import FAMILIES, family_of
from mia_fast.pipeline.families.llama import LLAMA, llama_layer, sliding_window
from mia_fast.pipeline.packed_layers import HeadShape

pytestmark = pytest.mark.lower_bounds

CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def tiny_llama_layer() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(config).eval().model.layers[0]


@pytest.mark.parametrize("reorder", [False, True])
def test_a_llama_layer_holds_the_models_products_with_q_and_k_paired_when_reordered(reorder):
    layer, shape = tiny_llama_layer(), HeadShape(heads=4, kv_heads=2, head_dim=8, rotary_dims=8)
    packed, x = llama_layer(layer, shape, None, reorder=reorder), random(5, 32, seed=1)
    attention = layer.self_attn
    with torch.no_grad():
        q, k, v = packed.qkv(x)
        q_rows = shape.paired(4) if reorder else torch.arange(32)
        k_rows = shape.paired(2) if reorder else torch.arange(16)
        torch.testing.assert_close(q, attention.q_proj(x)[:, q_rows].view(5, 4, 8), **CLOSE)
        torch.testing.assert_close(k, attention.k_proj(x)[:, k_rows].view(5, 2, 8), **CLOSE)
        torch.testing.assert_close(v, attention.v_proj(x).view(5, 2, 8), **CLOSE)
        torch.testing.assert_close(packed.mlp.added_to(x, torch.zeros(5, 32)), layer.mlp(x), **CLOSE)
        torch.testing.assert_close(packed.input_norm(x), layer.input_layernorm(x), **CLOSE)
        torch.testing.assert_close(packed.out(x), attention.o_proj(x), **CLOSE)
    assert not packed.parallel and packed.qkv.per_head is False


def test_the_family_serves_llama_mistral_and_qwen2():
    assert {t: family_of(t) for t in ("llama", "mistral", "qwen2")} == dict.fromkeys(
        ("llama", "mistral", "qwen2"), LLAMA
    )
    assert family_of("gpt2") is None and "gpt2" not in FAMILIES


def test_mistral_windows_every_layer_and_qwen2_the_layers_it_names():
    mistral = transformers.MistralConfig(sliding_window=16, num_hidden_layers=3)
    assert [sliding_window(mistral, i) for i in range(3)] == [16, 16, 16]
    assert sliding_window(transformers.MistralConfig(sliding_window=None), 0) is None
    qwen2 = transformers.Qwen2Config(
        use_sliding_window=True, sliding_window=16, max_window_layers=1, num_hidden_layers=3
    )
    assert [sliding_window(qwen2, i) for i in range(3)] == [None, 16, 16]
    assert sliding_window(transformers.Qwen2Config(num_hidden_layers=2), 1) is None
    assert sliding_window(transformers.LlamaConfig(), 0) is None


def test_it_refuses_another_activation_and_mlp_biases():
    assert "gelu" in LLAMA.refuses(transformers.LlamaConfig(hidden_act="gelu"), 64)
    assert "biases" in LLAMA.refuses(transformers.LlamaConfig(mlp_bias=True), 64)
    assert LLAMA.refuses(transformers.MistralConfig(sliding_window=8), 64) is None
