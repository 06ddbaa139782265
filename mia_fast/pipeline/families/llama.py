"""The Llama family: llama, mistral, qwen2. RMS norms, q/k/v and output products (with biases where the model has
them: Qwen2's q/k/v), a SiLU-gated MLP, the residual after each; Mistral attends through its sliding window in every
layer, Qwen2 in the layers its ``layer_types`` name ``sliding_attention``."""

from __future__ import annotations

import torch

from mia_fast.pipeline.families import FamilySpec, register_family
from mia_fast.pipeline.packed_layers import (
    MLP,
    QKV,
    DecoderLayer,
    HeadShape,
    decoder_layer,
    fused_product,
    linear_product,
)


def llama_layer(layer: torch.nn.Module, shape: HeadShape, config, *, reorder: bool) -> DecoderLayer:
    attention, mlp = layer.self_attn, layer.mlp
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    if reorder:
        rows = [shape.paired(shape.heads), shape.paired(shape.kv_heads), None]
        qkv = QKV((fused_product(projections, rows, reorder=reorder),), shape)
    else:
        qkv = QKV(tuple(linear_product(m, reorder=reorder) for m in projections), shape)
    gated = MLP(
        linear_product(mlp.up_proj, reorder=reorder),
        linear_product(mlp.down_proj, reorder=reorder),
        linear_product(mlp.gate_proj, reorder=reorder),
    )
    return decoder_layer(
        layer, qkv, linear_product(attention.o_proj, reorder=reorder), gated, parallel=False, reorder=reorder
    )


def sliding_window(config, layer: int) -> int | None:
    """The window of ``layer``: where the config lists its layers' kinds (Qwen2), the sliding ones' only; else
    (Mistral) every layer's, if the config has one."""
    window = getattr(config, "sliding_window", None)
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return window if kinds[layer] == "sliding_attention" else None
    return window


def refuses(config, max_length: int) -> str | None:
    activation = getattr(config, "hidden_act", "silu")
    if activation != "silu":
        return f"activation {activation!r} is not silu"
    if getattr(config, "mlp_bias", False):
        return "the MLP has biases"
    return None


LLAMA = register_family(FamilySpec(("llama", "mistral", "qwen2"), llama_layer, window=sliding_window, refuses=refuses))
