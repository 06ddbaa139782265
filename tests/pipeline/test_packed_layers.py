"""The packed decoder's layers (pipeline.packed_layers) against torch's formulas and the model's own modules:
products on the model's weights or a reordered copy, norms, both families' MLPs, q/k/v in each layout, and the
rotary pairing's row order."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers

from mia_fast.pipeline.device import onednn_layout
from mia_fast.pipeline.packed_layers import (
    MLP,
    QKV,
    HeadShape,
    Norm,
    Product,
    linear_product,
    llama_layer,
    neox_layer,
)

# A copy in oneDNN's layout sums in another order: equal to a few float32 ulps.
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def weights() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [5, 16], a weight [12, 16] and a bias [12]."""
    return random(5, 16, seed=1), random(12, 16, seed=2), random(12, seed=3)


def test_a_product_on_the_models_own_weight_is_its_linear(weights):
    x, weight, bias = weights
    product = Product(weight, bias, reorder=False)
    assert not product.onednn and product.weight.data_ptr() == weight.data_ptr()  # no copy
    assert torch.equal(product(x), F.linear(x, weight, bias))
    assert torch.equal(Product(weight, None, reorder=False)(x), F.linear(x, weight))


def test_a_reordered_product_computes_the_same_linear(weights):
    x, weight, bias = weights
    product = Product(weight, bias, reorder=True)
    assert product.onednn == onednn_layout(torch.device("cpu"))
    torch.testing.assert_close(product(x), F.linear(x, weight, bias), **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
@pytest.mark.parametrize(
    ("activation", "formula"),
    [
        ("silu", F.silu),
        ("gelu", lambda y: F.gelu(y)),
        ("gelu_new", lambda y: F.gelu(y, approximate="tanh")),
        ("gelu_pytorch_tanh", lambda y: F.gelu(y, approximate="tanh")),
    ],
)
def test_an_activated_product_is_the_activation_of_the_linear(weights, reorder, activation, formula):
    x, weight, bias = weights
    got = Product(weight, bias, reorder).activated(x, activation)
    torch.testing.assert_close(got, formula(F.linear(x, weight, bias)), **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
def test_a_product_times_or_added_to_another_tensor(weights, reorder):
    x, weight, bias = weights
    product, other = Product(weight, bias, reorder), random(5, 12, seed=4)
    linear = F.linear(x, weight, bias)
    torch.testing.assert_close(product.times(x, other.clone()), linear * other, **CLOSE)
    torch.testing.assert_close(product.added_to(x, other.clone()), linear + other, **CLOSE)


def test_without_an_epilogue_the_sum_is_added_to_the_total_in_place(weights):
    x, weight, bias = weights
    total = random(5, 12, seed=4)
    assert Product(weight, bias, reorder=False).added_to(x, total) is total


def test_a_linear_products_rows_pick_and_order_the_outputs(weights):
    x, weight, bias = weights
    module = torch.nn.Linear(16, 12)
    with torch.no_grad():
        module.weight.copy_(weight)
        module.bias.copy_(bias)
    rows = torch.tensor([3, 0, 7])
    torch.testing.assert_close(linear_product(module, True, rows)(x), F.linear(x, weight, bias)[:, rows], **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
def test_a_gated_mlp_is_down_of_up_times_silu_of_gate(reorder):
    x, total = random(5, 16, seed=1), random(5, 16, seed=2)
    up, gate, down = random(24, 16, seed=3), random(24, 16, seed=4), random(16, 24, seed=5)
    mlp = MLP(Product(up, None, reorder), Product(down, None, reorder), Product(gate, None, reorder))
    expected = total + F.linear(F.linear(x, up) * F.silu(F.linear(x, gate)), down)
    torch.testing.assert_close(mlp.added_to(x, total.clone()), expected, **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
def test_a_plain_mlp_is_down_of_the_activation_of_up(reorder):
    x, total = random(5, 16, seed=1), random(5, 16, seed=2)
    up, up_bias, down, down_bias = random(24, 16, seed=3), random(24, seed=4), random(16, 24, seed=5), random(16)
    mlp = MLP(Product(up, up_bias, reorder), Product(down, down_bias, reorder), activation="gelu_new")
    expected = total + F.linear(F.gelu(F.linear(x, up, up_bias), approximate="tanh"), down, down_bias)
    torch.testing.assert_close(mlp.added_to(x, total.clone()), expected, **CLOSE)


def test_an_rms_norm_is_the_llama_familys():
    module = transformers.models.llama.modeling_llama.LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        module.weight.copy_(random(16, seed=5))
    x = random(5, 16, seed=1) * 3
    norm = Norm(module)
    assert not norm.layer_norm and norm.eps == 1e-5
    expected = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * module.weight
    torch.testing.assert_close(norm(x.clone()), expected, **CLOSE)
    torch.testing.assert_close(norm(x.clone()), module(x), **CLOSE)


@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_norm_is_torchs_with_its_bias(bias):
    module = torch.nn.LayerNorm(16, eps=1e-4, bias=bias)
    with torch.no_grad():
        module.weight.copy_(random(16, seed=5))
        if bias:
            module.bias.copy_(random(16, seed=6))
    x = random(5, 16, seed=1) * 3 + 1
    norm = Norm(module)
    assert norm.layer_norm and norm.eps == 1e-4 and (norm.bias is not None) == bias
    torch.testing.assert_close(norm(x), module(x), **CLOSE)


def test_paired_puts_each_rotary_pair_side_by_side_and_the_rest_after():
    shape = HeadShape(heads=2, kv_heads=1, head_dim=6, rotary_dims=4)
    assert shape.paired(2).tolist() == [0, 2, 1, 3, 4, 5, 6, 8, 7, 9, 10, 11]
    assert shape.paired(1).tolist() == [0, 2, 1, 3, 4, 5]
    assert HeadShape(4, 2, 4, 4).paired(2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_a_fused_qkv_is_split_into_q_k_and_v_heads():
    shape = HeadShape(heads=4, kv_heads=2, head_dim=3, rotary_dims=2)
    x = random(5, 24, seed=1)
    qkv = QKV((Product(torch.eye(24), None, reorder=False),), shape)
    q, k, v = qkv(x)
    assert q.shape == (5, 4, 3) and k.shape == (5, 2, 3) and v.shape == (5, 2, 3)
    assert torch.equal(q.reshape(5, 12), x[:, :12]) and torch.equal(k.reshape(5, 6), x[:, 12:18])
    assert torch.equal(v.reshape(5, 6), x[:, 18:])


def test_a_per_head_qkv_reads_each_heads_q_k_and_v_in_turn():
    shape = HeadShape(heads=2, kv_heads=2, head_dim=3, rotary_dims=2)
    x = random(5, 18, seed=1)
    q, k, v = QKV((Product(torch.eye(18), None, reorder=False),), shape, per_head=True)(x)
    assert torch.equal(q[:, 1], x[:, 9:12]) and torch.equal(k[:, 1], x[:, 12:15]) and torch.equal(v[:, 0], x[:, 6:9])


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


def tiny_neox_layer() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPTNeoXConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, rotary_pct=0.5
    )
    return transformers.GPTNeoXForCausalLM(config).eval().gpt_neox.layers[0]


@pytest.mark.parametrize("reorder", [False, True])
def test_a_llama_layer_holds_the_models_products_with_q_and_k_paired_when_reordered(reorder):
    layer, shape = tiny_llama_layer(), HeadShape(heads=4, kv_heads=2, head_dim=8, rotary_dims=8)
    packed, x = llama_layer(layer, shape, reorder), random(5, 32, seed=1)
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


@pytest.mark.parametrize("reorder", [False, True])
def test_a_neox_layer_gathers_each_heads_q_k_and_v_with_q_and_k_paired_when_reordered(reorder):
    layer, shape = tiny_neox_layer(), HeadShape(heads=4, kv_heads=4, head_dim=8, rotary_dims=4)
    packed, x = neox_layer(layer, shape, reorder, "gelu"), random(5, 32, seed=1)
    within = shape.paired(1) if reorder else torch.arange(8)
    with torch.no_grad():
        q, k, v = packed.qkv(x)
        heads = layer.attention.query_key_value(x).view(5, 4, 3, 8)
        torch.testing.assert_close(q, heads[:, :, 0, within], **CLOSE)
        torch.testing.assert_close(k, heads[:, :, 1, within], **CLOSE)
        torch.testing.assert_close(v, heads[:, :, 2], **CLOSE)
        torch.testing.assert_close(packed.mlp.added_to(x, torch.zeros(5, 32)), layer.mlp(x), **CLOSE)
        torch.testing.assert_close(packed.post_norm(x), layer.post_attention_layernorm(x), **CLOSE)
    assert packed.parallel == layer.use_parallel_residual and packed.mlp.gate is None
