"""The packed decoder's layers, built from a model's modules (:mod:`mia_fast.pipeline.packed` runs them): products
whose weights are the model's own or a copy fused, reordered for the rotary embedding and laid out for oneDNN
(:class:`Product`), q/k/v, norms, MLPs with and without a gate, and the decoder layer they make up (each family
builds its own from these, :mod:`mia_fast.pipeline.families`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mia_fast.pipeline.device import onednn_layout, torch_internal

# gpt_neox's activations, as oneDNN's GELU epilogue and torch's gelu name their formula.
GELUS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
# The products' row count oneDNN lays the weights out for; any row count works, this one is typical.
_PACKING_ROWS = 1024


class Product:
    """x -> x @ weight.T + bias. With ``reorder`` on a CPU with oneDNN the weight is copied once into its blocked
    layout, and in fp32 what follows a product (an activation, a product or a sum with another tensor of its shape)
    runs in oneDNN's epilogue, on each tile while it is in cache, instead of another pass over the output. In bf16 the
    epilogues moved the built-in model's losses further from fp32 (largest deviation 1.2e-2 against 8.1e-3 over 32
    texts), so there they stay separate ops. Without ``reorder`` the model's own weight is used as it is."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, *, reorder: bool) -> None:
        self.weight = weight.detach()
        self.bias = bias.detach() if bias is not None else None
        self.onednn = reorder and onednn_layout(self.weight.device, self.weight.dtype)
        self.epilogues = self.onednn and self.weight.dtype == torch.float32
        if self.onednn:
            reorder_weight = torch_internal(torch.ops.mkldnn, "_reorder_linear_weight")
            self.weight = reorder_weight(self.weight.contiguous(), _PACKING_ROWS)
            self.bias = self.bias.contiguous() if self.bias is not None else None
            # oneDNN's product with an epilogue: (x, weight, bias, activation, its scalars, its algorithm), or with
            # .binary (x, other, weight, bias, "mul" or "add").
            self.pointwise = torch_internal(torch.ops.mkldnn, "_linear_pointwise")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            return self.pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def activated(self, x: torch.Tensor, activation: str) -> torch.Tensor:
        """activation(x @ weight.T + bias): ``silu``, or a GELU of :data:`GELUS`."""
        if activation == "silu":
            if self.epilogues:
                return self.pointwise(x, self.weight, self.bias, "swish", [], "")
            return F.silu(self(x))
        if self.epilogues:
            return self.pointwise(x, self.weight, self.bias, "gelu", [], GELUS[activation])
        return F.gelu(self(x), approximate=GELUS[activation])

    def times(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """(x @ weight.T + bias) * other, ``other`` of the product's shape and dtype."""
        if self.epilogues:
            return self.pointwise.binary(x, other, self.weight, self.bias, "mul")
        return self(x).mul_(other)

    def added_to(self, x: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        """total + (x @ weight.T + bias): a new tensor where the sum runs in the epilogue, else ``total`` itself,
        added to in place."""
        if self.epilogues:
            return self.pointwise.binary(x, total, self.weight, self.bias, "add")
        return total.add_(self(x))


def linear_product(module: torch.nn.Linear, rows: torch.Tensor | None = None, *, reorder: bool) -> Product:
    """The product of a linear layer; ``rows`` picks and orders its output rows (a copy, so only with ``reorder``)."""
    weight, bias = module.weight, module.bias
    if rows is not None:
        weight, bias = weight[rows], None if bias is None else bias[rows]
    return Product(weight, bias, reorder=reorder)


def fused_product(modules: Sequence[torch.nn.Linear], rows: Sequence[torch.Tensor | None], *, reorder: bool) -> Product:
    """One product for several linear layers (a copy of their weights), each layer's output rows ordered by
    ``rows`` (None: as they are)."""
    weights = [m.weight if order is None else m.weight[order] for m, order in zip(modules, rows)]
    if any(m.bias is None for m in modules):
        return Product(torch.cat(weights), None, reorder=reorder)
    biases = [m.bias if order is None else m.bias[order] for m, order in zip(modules, rows)]
    return Product(torch.cat(weights), torch.cat(biases), reorder=reorder)


@dataclass(frozen=True)
class HeadShape:
    """Attention heads, key/value heads, dims per head and the rotary embedding's dims (the first of each head)."""

    heads: int
    kv_heads: int
    head_dim: int
    rotary_dims: int

    def paired(self, heads: int) -> torch.Tensor:
        """Row order that puts rotary dims j and j + rotary_dims/2 of each head side by side (the rest of the head
        after them, as it was): the rotary embedding then turns each pair by a complex product. q and k are reordered
        alike, so their dot products do not change."""
        half = self.rotary_dims // 2
        within = torch.cat(
            [
                torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1),
                torch.arange(self.rotary_dims, self.head_dim),
            ]
        )
        return (torch.arange(heads).unsqueeze(1) * self.head_dim + within).reshape(-1)


@dataclass(frozen=True)
class QKV:
    """q [n, heads, D], k and v [n, kv_heads, D] of the normed input: from three products (the model's own weights),
    or one whose output is q, k and v side by side, or one whose output holds each head's q, k and v in turn
    (``per_head``, gpt_neox's own layout)."""

    products: tuple[Product, ...]
    shape: HeadShape
    per_head: bool = False

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n, heads, kv_heads, head_dim = x.shape[0], self.shape.heads, self.shape.kv_heads, self.shape.head_dim
        if len(self.products) == 3:
            q, k, v = (product(x) for product in self.products)
        elif self.per_head:
            q, k, v = self.products[0](x).view(n, heads, 3, head_dim).unbind(2)
            return q, k, v
        else:
            q, k, v = self.products[0](x).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=1)
        return q.view(n, heads, head_dim), k.view(n, kv_heads, head_dim), v.view(n, kv_heads, head_dim)


def _fused_rms_norm_op():
    """torch's one-pass RMS norm (fp32 inside, one rounding to the input's dtype) where this torch has it with the
    signature read here; None elsewhere (older releases had none, or another signature)."""
    op = getattr(torch.ops.aten, "_fused_rms_norm", None)
    if op is None:
        return None
    names = [argument.name for argument in torch_internal(op.default, "_schema").arguments]
    return op if names == ["input", "normalized_shape", "weight", "eps"] else None


_FUSED_RMS_NORM = _fused_rms_norm_op()


class Norm:
    """RMS norm (the Llama family) or LayerNorm with its bias (gpt_neox), of the residual stream: computed in fp32 and
    rounded once to the model's dtype (the model's own RMS norm rounds twice: before and after
    its weight). ``fused``: the RMS norm as one op, reading and writing the stream once (on a GPU; on a CPU torch's
    fused op measured 3-6x slower than the few ops of the formula, so there it runs as those)."""

    def __init__(self, module: torch.nn.Module, *, fused: bool) -> None:
        self.weight = module.weight.detach()
        self.layer_norm = isinstance(module, torch.nn.LayerNorm)
        bias = getattr(module, "bias", None) if self.layer_norm else None
        self.bias = bias.detach() if bias is not None else None
        self.eps = module.eps if self.layer_norm else getattr(module, "variance_epsilon", None) or module.eps
        self.fused = fused
        self.fp32_weight = self.weight.float()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The norm of ``x`` (the residual stream, in the model's dtype or in fp32), in the model's dtype."""
        own_dtype = x.dtype == self.weight.dtype
        if self.layer_norm:
            if own_dtype:
                return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
            bias = None if self.bias is None else self.bias.float()
            return F.layer_norm(x.float(), self.weight.shape, self.fp32_weight, bias, self.eps).to(self.weight.dtype)
        if self.fused and own_dtype and _FUSED_RMS_NORM is not None:
            return _FUSED_RMS_NORM(x, list(self.weight.shape), self.weight, self.eps)[0]
        if self.fused and own_dtype:  # on a GPU torch's own fused kernel where it has one
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        wide = x.float()
        normed = wide * torch.rsqrt(wide.square().mean(-1, keepdim=True).add_(self.eps))
        return normed.mul_(self.fp32_weight).to(self.weight.dtype)


@dataclass(frozen=True)
class MLP:
    """down(up(x) * SiLU(gate(x))) with a ``gate`` (the Llama family's), else down(activation(up(x))) (gpt_neox's)."""

    up: Product
    down: Product
    gate: Product | None = None
    activation: str = "silu"

    def added_to(self, normed: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down.added_to(self.up.times(normed, self.gate.activated(normed, "silu")), total)
        return self.down.added_to(self.up.activated(normed, self.activation), total)


@dataclass(frozen=True)
class DecoderLayer:
    """One decoder layer. ``parallel``: attention and MLP both read the layer's input (gpt_neox's parallel residual);
    otherwise the MLP reads the input plus the attention's output."""

    input_norm: Norm
    qkv: QKV
    out: Product
    post_norm: Norm
    mlp: MLP
    parallel: bool


def decoder_layer(
    layer: torch.nn.Module, qkv: QKV, out: Product, mlp: MLP, *, parallel: bool, reorder: bool
) -> DecoderLayer:
    """A decoder layer whose norms are named as transformers names them in most families: ``input_layernorm`` and
    ``post_attention_layernorm`` (fused where the weights are not copied: on a GPU)."""
    fused = not reorder
    norms = (Norm(layer.input_layernorm, fused=fused), Norm(layer.post_attention_layernorm, fused=fused))
    return DecoderLayer(norms[0], qkv, out, norms[1], mlp, parallel)
