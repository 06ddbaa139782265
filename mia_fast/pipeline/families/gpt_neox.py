"""gpt_neox (Pythia): LayerNorms with biases, one q/k/v product whose rows hold each head's q, k and v in turn, a
partial rotary embedding (the first rotary_pct of each head), a GELU MLP, and the parallel residual (attention and
MLP both read the layer's input) where the config says so."""

from __future__ import annotations

import torch

from mia_fast.pipeline.families import FamilySpec, register_family
from mia_fast.pipeline.packed_layers import GELUS, MLP, QKV, DecoderLayer, HeadShape, decoder_layer, linear_product


def neox_layer(layer: torch.nn.Module, shape: HeadShape, config, *, reorder: bool) -> DecoderLayer:
    attention, mlp = layer.attention, layer.mlp
    if reorder:
        # The model's rows hold each head's q, k and v in turn: gathered into all q, all k, all v, each paired.
        heads, head_dim = shape.heads, shape.head_dim
        head_starts = (torch.arange(heads) * 3 * head_dim).repeat_interleave(head_dim)
        within = shape.paired(heads) - torch.arange(heads).repeat_interleave(head_dim) * head_dim
        plain = torch.arange(head_dim).repeat(heads)
        rows = torch.cat([head_starts + within, head_starts + head_dim + within, head_starts + 2 * head_dim + plain])
        qkv = QKV((linear_product(attention.query_key_value, rows, reorder=reorder),), shape)
    else:
        qkv = QKV((linear_product(attention.query_key_value, reorder=reorder),), shape, per_head=True)
    up, down = linear_product(mlp.dense_h_to_4h, reorder=reorder), linear_product(mlp.dense_4h_to_h, reorder=reorder)
    feed_forward = MLP(up, down, activation=config.hidden_act)
    out = linear_product(attention.dense, reorder=reorder)
    return decoder_layer(layer, qkv, out, feed_forward, parallel=layer.use_parallel_residual, reorder=reorder)


def refuses(config, max_length: int) -> str | None:
    if config.hidden_act not in GELUS:
        return f"activation {config.hidden_act!r} is not one of {', '.join(GELUS)}"
    return None


GPT_NEOX = register_family(
    FamilySpec(("gpt_neox",), neox_layer, embedding="embed_in", final_norm="final_layer_norm", refuses=refuses)
)
