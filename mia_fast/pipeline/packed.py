"""A pad-free forward of Llama-family decoders (llama, mistral, qwen2) for scoring: the final hidden states
of many sequences at once, each as the model alone would give it (in fp32 within 1e-5 of its own forward).

Why not the model's own forward: on a CPU the forward is all matrix products, and four things cost
there. Padding: a batch's rows are packed end to end, so every product runs on real tokens only (only
the attention pads, each sequence to its own length rounded up to 16). Small products: q, k and v are
one product, with the weights concatenated once. Weight layout: on CPU every weight is reordered once
into oneDNN's blocked layout (measured 1.1-1.3x faster products than ``F.linear`` on the same weights).
Passes over the products' outputs: in fp32 the MLP's SiLU and its gate's product, and both residual sums,
run in oneDNN's epilogues (:class:`_Product`). In bf16 the residual stream, the norms and the rotary embedding
stay in fp32 and only the products' inputs are rounded to bf16, so bf16 scores stay closer to fp32
than the model's own bf16 forward (whose residual stream is bf16). The attention runs in fp32 too: on CPU,
torch's fp32 flash attention is faster than its bf16 one at these sizes, and exact.

A sequence may follow a shared context (a pass's prefix, the same before every text): its keys and values are
computed once (:meth:`PackedDecoder.context`) and every sequence after it attends to them, its own positions
starting where the context ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mia_fast.ops.token_stats import StreamedTokenStats

PACKED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2"})
# The products' row count oneDNN lays the weights out for; any row count works, this one is typical.
_PACKING_ROWS = 1024
# Output-head rows projected at once: a chunk's weight and logits stay in cache while they are reduced.
HEAD_CHUNK_IDS = 4096


def packed_unsupported(model: torch.nn.Module, max_length: int) -> str | None:
    """Why ``model`` cannot run packed with windows of ``max_length`` ids; None when it can."""
    config = model.config
    if config.model_type not in PACKED_MODEL_TYPES:
        return f"model type {config.model_type!r} is not one of {', '.join(sorted(PACKED_MODEL_TYPES))}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} is not silu"
    if getattr(config, "mlp_bias", False):
        return "the MLP has biases"
    window = getattr(config, "sliding_window", None)
    sliding = "sliding_attention" in (getattr(config, "layer_types", None) or [])
    if config.model_type == "mistral":
        sliding = window is not None
    if sliding and window is not None and window < max_length:
        return f"sliding-window attention ({window}) shorter than the {max_length}-id window"
    return None


class _Product:
    """x -> x @ weight.T + bias. On a CPU with oneDNN the weight is reordered once into its blocked layout
    (measured 1.1-1.3x faster products than ``F.linear`` on the same weights), and in fp32 what follows a product
    (SiLU, a product or a sum with another tensor of its shape) runs in oneDNN's epilogue, on each tile while it is
    in cache, instead of another pass over the output. In bf16 the epilogues moved the built-in model's losses
    further from fp32 (largest deviation 1.2e-2 against 8.1e-3 over 32 texts), so there they stay separate ops."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.weight = weight.detach().contiguous()
        self.bias = bias.detach().contiguous() if bias is not None else None
        self.onednn = self.weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
        self.epilogues = self.onednn and self.weight.dtype == torch.float32
        if self.onednn:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(self.weight, _PACKING_ROWS)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def silu(self, x: torch.Tensor) -> torch.Tensor:
        if self.epilogues:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "swish", [], "")
        return F.silu(self(x))

    def times(self, x: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        """(x @ weight.T + bias) * other, ``other`` of the product's shape and dtype."""
        if self.epilogues:
            return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.weight, self.bias, "mul")
        return self(x).mul_(other)

    def added_to(self, x: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        """total + (x @ weight.T + bias): a new tensor where the sum runs in the epilogue, else ``total`` itself,
        added to in place (a bf16 product onto the fp32 residual stream)."""
        if self.epilogues:
            return torch.ops.mkldnn._linear_pointwise.binary(x, total, self.weight, self.bias, "add")
        return total.add_(self(x))


def _fused(*modules: torch.nn.Linear, rows: Sequence[torch.Tensor | None] | None = None) -> _Product:
    """One product for several linear layers; ``rows`` reorders each layer's output rows (None: as they are)."""
    rows = rows or [None] * len(modules)
    weights = [m.weight.detach() if order is None else m.weight.detach()[order] for m, order in zip(modules, rows)]
    biases = [m.bias for m in modules]
    if any(b is None for b in biases):
        return _Product(torch.cat(weights), None)
    return _Product(
        torch.cat(weights),
        torch.cat([b.detach() if order is None else b.detach()[order] for b, order in zip(biases, rows)]),
    )


def _interleaved_halves(heads: int, head_dim: int) -> torch.Tensor:
    """Row order that puts dims j and j + head_dim/2 of each head side by side: the rotary embedding then turns
    each pair by a complex product. q and k are reordered alike, so their dot products do not change."""
    half = head_dim // 2
    within = torch.stack([torch.arange(half), torch.arange(half) + half], dim=1).reshape(-1)
    return (torch.arange(heads).unsqueeze(1) * head_dim + within).reshape(-1)


# Sequences are padded to their length rounded up to this for the attention.
ATTENTION_WIDTH_STEP = 16
# Prefixes whose keys and values a decoder keeps (at most max_length / 2 ids each; 46 KB per id for SmolLM2-135M).
KEPT_CONTEXTS = 8


@dataclass(frozen=True, eq=False)
class SharedContext:
    """A prefix's keys (rotated) and values at every layer, each fp32 [1, kv_heads, length, head_dim]: computed once
    by :meth:`PackedDecoder.context`, then attended to by every sequence placed after it, whatever its batch."""

    length: int
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class _AttentionGroup:
    """Sequences whose lengths round up to the same ``width`` and that follow the same ``context`` (None: none): one
    padded [rows, width] attention call. ``gather`` picks each padded slot's packed token (padding repeats one; a
    causal mask never reads it), ``slots`` each real token's padded slot, ``tokens`` the packed positions of those
    tokens; ``mask`` lets a slot see the whole context and the slots up to its own (None: plain causal)."""

    rows: int
    width: int
    gather: torch.Tensor
    slots: torch.Tensor
    tokens: torch.Tensor
    context: SharedContext | None
    mask: torch.Tensor | None


def _attention_groups(
    lengths: Sequence[int], contexts: Sequence[SharedContext | None], device: torch.device
) -> list[_AttentionGroup]:
    """A sequence's padded width depends on its own length only, and the attention kernel computes each
    sequence of a call alone: so its attention, like the products, does not depend on the batch by a bit."""
    starts = [0, *itertools.accumulate(lengths)][:-1]
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, n in enumerate(lengths):
        by_key.setdefault((id(contexts[i]), -(-n // ATTENTION_WIDTH_STEP) * ATTENTION_WIDTH_STEP), []).append(i)
    groups = []
    for (_, width), members in by_key.items():
        gather = torch.full((len(members), width), starts[members[0]], dtype=torch.long)
        slots, tokens = [], []
        for row, i in enumerate(members):
            gather[row, : lengths[i]] = torch.arange(starts[i], starts[i] + lengths[i])
            slots.append(torch.arange(lengths[i]) + row * width)
            tokens.append(torch.arange(starts[i], starts[i] + lengths[i]))
        context = contexts[members[0]]
        mask = None
        if context is not None:
            mask = torch.ones(width, context.length + width, dtype=torch.bool)
            mask[:, context.length :] = torch.ones(width, width, dtype=torch.bool).tril()
            mask = mask.to(device)
        groups.append(
            _AttentionGroup(
                len(members),
                width,
                gather.reshape(-1).to(device),
                torch.cat(slots).to(device),
                torch.cat(tokens).to(device),
                context,
                mask,
            )
        )
    return groups


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: _Product
    out: _Product
    post_norm: torch.Tensor
    gate: _Product
    up: _Product
    down: _Product


class PackedDecoder:
    """The final-normed hidden states of packed sequences: ``hidden(ids, lengths)``.

    Rows of ``ids`` are the sequences' ids end to end; each sequence starts at position 0. The result
    is fp32 whatever the model's dtype. Built from a loaded model's modules (their weights copied once
    into fused, reordered ones); the model itself is left as it was.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.source = self.stamp(model)
        config = model.config
        base = model.base_model
        self.dtype = next(model.parameters()).dtype
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.eps = config.rms_norm_eps
        self.final_norm = base.norm.weight.detach().float()
        self._contexts: dict[tuple[int, ...], SharedContext] = {}
        self.layers = [
            _Layer(
                input_norm=layer.input_layernorm.weight.detach().float(),
                qkv=_fused(
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                    rows=[
                        _interleaved_halves(self.heads, self.head_dim),
                        _interleaved_halves(self.kv_heads, self.head_dim),
                        None,
                    ],
                ),
                out=_fused(layer.self_attn.o_proj),
                post_norm=layer.post_attention_layernorm.weight.detach().float(),
                gate=_fused(layer.mlp.gate_proj),
                up=_fused(layer.mlp.up_proj),
                down=_fused(layer.mlp.down_proj),
            )
            for layer in base.layers
        ]
        head = model.get_output_embeddings()
        self.head_chunks = [
            (
                start,
                _Product(
                    head.weight[start : start + HEAD_CHUNK_IDS],
                    None if head.bias is None else head.bias[start : start + HEAD_CHUNK_IDS],
                ),
            )
            for start in range(0, head.weight.shape[0], HEAD_CHUNK_IDS)
        ]

    @staticmethod
    def stamp(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
        """Which parameter tensors the model holds and how often each was changed in place: an optimizer step or
        a move to another dtype changes it, and the copies made from the model are then stale."""
        return tuple((id(p), p._version) for p in model.parameters())

    def _inverse_rms(self, x: torch.Tensor) -> torch.Tensor:
        return torch.rsqrt(x.square().mean(-1, keepdim=True).add_(self.eps))

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMS norm in fp32, rounded to the model's dtype once, for the next product."""
        return (x * self._inverse_rms(x)).mul_(weight).to(self.dtype)

    @torch.inference_mode()
    def hidden(
        self, ids: torch.Tensor, lengths: Sequence[int], contexts: Sequence[SharedContext | None] | None = None
    ) -> torch.Tensor:
        """The final-normed hidden states [ids, H] of the packed sequences, each after ``contexts[i]`` (None: none)."""
        x, _ = self._forward(ids, lengths, contexts or [None] * len(lengths), keep=False)
        return x.mul_(self._inverse_rms(x)).mul_(self.final_norm)

    def context(self, ids: Sequence[int]) -> SharedContext:
        """The keys and values of a prefix's ``ids``, computed the first time and kept (the latest
        ``KEPT_CONTEXTS``) for every later sequence placed after the same ids."""
        key = tuple(ids)
        found = self._contexts.pop(key, None)
        if found is None:
            with torch.inference_mode():
                _, kept = self._forward(torch.tensor(key, device=self.final_norm.device), [len(key)], [None], keep=True)
            found = SharedContext(len(key), tuple(k for k, _ in kept), tuple(v for _, v in kept))
        self._contexts[key] = found
        while len(self._contexts) > KEPT_CONTEXTS:
            del self._contexts[next(iter(self._contexts))]
        return found

    def _forward(
        self, ids: torch.Tensor, lengths: Sequence[int], contexts: Sequence[SharedContext | None], keep: bool
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The residual stream after the last layer, and (``keep``) each layer's keys and values of the one sequence
        run, shaped as a :class:`SharedContext` holds them."""
        device, total = ids.device, int(ids.shape[0])
        positions = torch.cat(
            [torch.arange(n, device=device) + (c.length if c is not None else 0) for n, c in zip(lengths, contexts)]
        )
        groups = _attention_groups(lengths, contexts, device)
        x = self.embed(ids).float()
        half = self.head_dim // 2
        cos, sin = self.rotary(x, positions.unsqueeze(0))
        turn = torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float()).unsqueeze(1)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attended = torch.empty(total, q_size, device=device)
        kept: list[tuple[torch.Tensor, torch.Tensor]] = []

        def rotate(t: torch.Tensor) -> torch.Tensor:
            pairs = torch.view_as_complex(t.float().unflatten(-1, (half, 2)))
            return torch.view_as_real(pairs * turn).flatten(-2)

        for index, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(x, layer.input_norm))
            q = rotate(qkv[:, :q_size].view(total, self.heads, self.head_dim))
            k = rotate(qkv[:, q_size : q_size + kv_size].view(total, self.kv_heads, self.head_dim))
            v = qkv[:, q_size + kv_size :].float().view(total, self.kv_heads, self.head_dim)
            if keep:
                kept.append((k.transpose(0, 1).unsqueeze(0).contiguous(), v.transpose(0, 1).unsqueeze(0).contiguous()))
            for group in groups:
                padded_q, padded_k, padded_v = (
                    t.index_select(0, group.gather).view(group.rows, group.width, -1, self.head_dim).transpose(1, 2)
                    for t in (q, k, v)
                )
                if group.context is None:
                    out = F.scaled_dot_product_attention(
                        padded_q, padded_k, padded_v, is_causal=True, enable_gqa=self.kv_heads != self.heads
                    )
                else:
                    shared = group.context
                    out = F.scaled_dot_product_attention(
                        padded_q,
                        torch.cat([shared.keys[index].expand(group.rows, -1, -1, -1), padded_k], dim=2),
                        torch.cat([shared.values[index].expand(group.rows, -1, -1, -1), padded_v], dim=2),
                        attn_mask=group.mask,
                        enable_gqa=self.kv_heads != self.heads,
                    )
                attended[group.tokens] = out.transpose(1, 2).reshape(-1, q_size).index_select(0, group.slots)
            x = layer.out.added_to(attended.to(self.dtype), x)
            normed = self._norm(x, layer.post_norm)
            x = layer.down.added_to(layer.up.times(normed, layer.gate.silu(normed)), x)
        return x, kept

    @torch.inference_mode()
    def token_stats(
        self, hidden: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logp, mu, var, max_logp) of the output head's logits at ``hidden`` [n, H] (fp32) for ``targets`` [n], a
        vocabulary chunk at a time."""
        stats = StreamedTokenStats(targets)
        hidden = hidden.to(self.dtype)
        for start, project in self.head_chunks:
            stats.add(project(hidden), start)
        return stats.result()
