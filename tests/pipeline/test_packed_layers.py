"""The packed decoder's layers (pipeline.packed_layers) against torch's formulas and the model's own modules:
products on the model's weights or a reordered copy, norms (in fp32, and bf16 rounded once), both kinds of MLP, q/k/v
in each layout, and the rotary pairing's row order (each family's layer: tests/pipeline/families)."""

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
)

pytestmark = pytest.mark.lower_bounds

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
    got = Product(weight, bias, reorder=reorder).activated(x, activation)
    torch.testing.assert_close(got, formula(F.linear(x, weight, bias)), **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
def test_a_product_times_or_added_to_another_tensor(weights, reorder):
    x, weight, bias = weights
    product, other = Product(weight, bias, reorder=reorder), random(5, 12, seed=4)
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
    torch.testing.assert_close(
        linear_product(module, rows, reorder=True)(x), F.linear(x, weight, bias)[:, rows], **CLOSE
    )


@pytest.mark.parametrize("reorder", [False, True])
def test_a_gated_mlp_is_down_of_up_times_silu_of_gate(reorder):
    x, total = random(5, 16, seed=1), random(5, 16, seed=2)
    up, gate, down = random(24, 16, seed=3), random(24, 16, seed=4), random(16, 24, seed=5)
    mlp = MLP(
        Product(up, None, reorder=reorder), Product(down, None, reorder=reorder), Product(gate, None, reorder=reorder)
    )
    expected = total + F.linear(F.linear(x, up) * F.silu(F.linear(x, gate)), down)
    torch.testing.assert_close(mlp.added_to(x, total.clone()), expected, **CLOSE)


@pytest.mark.parametrize("reorder", [False, True])
def test_a_plain_mlp_is_down_of_the_activation_of_up(reorder):
    x, total = random(5, 16, seed=1), random(5, 16, seed=2)
    up, up_bias, down, down_bias = random(24, 16, seed=3), random(24, seed=4), random(16, 24, seed=5), random(16)
    mlp = MLP(Product(up, up_bias, reorder=reorder), Product(down, down_bias, reorder=reorder), activation="gelu_new")
    expected = total + F.linear(F.gelu(F.linear(x, up, up_bias), approximate="tanh"), down, down_bias)
    torch.testing.assert_close(mlp.added_to(x, total.clone()), expected, **CLOSE)


@pytest.mark.parametrize("fused", [False, True])
def test_an_rms_norm_is_the_llama_familys(fused):
    module = transformers.models.llama.modeling_llama.LlamaRMSNorm(16, eps=1e-5)
    with torch.no_grad():
        module.weight.copy_(random(16, seed=5))
    x = random(5, 16, seed=1) * 3
    norm = Norm(module, fused=fused)
    assert not norm.layer_norm and norm.eps == 1e-5
    expected = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * module.weight
    torch.testing.assert_close(norm(x.clone()), expected, **CLOSE)
    torch.testing.assert_close(norm(x.clone()), module(x), **CLOSE)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_norm_is_torchs_with_its_bias(bias, fused):
    module = torch.nn.LayerNorm(16, eps=1e-4, bias=bias)
    with torch.no_grad():
        module.weight.copy_(random(16, seed=5))
        if bias:
            module.bias.copy_(random(16, seed=6))
    x = random(5, 16, seed=1) * 3 + 1
    norm = Norm(module, fused=fused)
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


@pytest.mark.parametrize("fused", [False, True])
def test_a_bf16_rms_norm_keeps_the_stream_in_bf16_rounded_once(fused):
    module = transformers.models.llama.modeling_llama.LlamaRMSNorm(256, eps=1e-5)
    with torch.no_grad():
        module.weight.copy_(random(256, seed=5) + 1)
    module = module.to(torch.bfloat16)
    x = (random(64, 256, seed=1) * 3).to(torch.bfloat16)
    got = Norm(module, fused=fused)(x)
    assert got.dtype == torch.bfloat16
    wide = x.double()
    exact = wide * torch.rsqrt(wide.square().mean(-1, keepdim=True) + 1e-5) * module.weight.double()
    # Rounded once, against the model's twice (before and after its weight).
    ours, theirs = ((t.double() - exact).abs().mean() for t in (got, module(x)))
    assert ours < theirs
    assert (got.double() - exact).abs().max() <= exact.abs().max() * 2**-8


def test_the_fused_rms_norm_is_used_only_with_the_signature_it_is_called_with(monkeypatch):
    from types import SimpleNamespace

    from mia_fast.pipeline import packed_layers

    assert packed_layers._fused_rms_norm_op() is torch.ops.aten._fused_rms_norm  # torch 2.13's signature
    other = SimpleNamespace(default=SimpleNamespace(_schema=SimpleNamespace(arguments=[SimpleNamespace(name="input")])))
    monkeypatch.setattr(torch.ops.aten, "_fused_rms_norm", other)
    assert packed_layers._fused_rms_norm_op() is None
    # Without it, a fused norm is torch's rms_norm (its own fused kernel on a GPU): the same values.
    module = transformers.models.llama.modeling_llama.LlamaRMSNorm(16, eps=1e-5)
    x = random(5, 16, seed=1) * 3
    fused = Norm(module, fused=True)(x)
    monkeypatch.setattr(packed_layers, "_FUSED_RMS_NORM", None)
    torch.testing.assert_close(Norm(module, fused=True)(x), fused, **CLOSE)
