"""A pad-free forward of decoders for scoring: the final hidden states of many sequences at once, each as the model
alone would give it (in fp32 within 1e-5 of its own forward). Llama-family decoders (llama, mistral, qwen2) and
gpt_neox (Pythia: parallel residual, partial rotary embedding, LayerNorm with biases, GELU) run so, on every device.

Why not the model's own forward: it pads a batch's rows to the longest and attends under a padding mask. Here a
batch's rows are packed end to end, every product runs on real tokens only, and the attention runs over the packed
sequences' offsets (:mod:`mia_fast.pipeline.attention`: torch's flash ``varlen_attn`` on a GPU, the segment-wise
reference elsewhere), each sequence alone.

Weights. On a CPU every weight is copied once into oneDNN's blocked layout (measured 1.1-1.3x faster products than
``F.linear`` on the same weights), q, k and v into one product, their rows ordered so that the rotary embedding turns
each pair of dims by a complex product (3-4x faster than the two halves' formula on CPU), and in fp32 what follows a
product (SiLU or GELU, the gate's product, the residual sums) runs in oneDNN's epilogues (:class:`_Product`).
Elsewhere (``reorder=False``, a GPU) no weight is copied: the products read the model's own weights, so a 16 GB model
stays 16 GB, and the rotary embedding turns the two halves of each head as the model does.

Precision. The residual stream, the norms and the rotary embedding stay in fp32 and only the products' inputs are
rounded to the model's dtype, so bf16 scores stay closer to fp32 than the model's own bf16 forward (whose residual
stream is bf16). The attention runs in fp32 through the reference (on CPU torch's fp32 flash attention is faster
than its bf16 one at these sizes, and exact), in the model's dtype through flash attention.

A sequence may follow a shared context (a pass's prefix, the same before every text): its keys and values are
computed once (:meth:`PackedDecoder.context`) and every sequence after it attends to them, its own positions
starting where the context ends.

Sampling decodes through the same layers (:class:`PackedDecoding`): a token per row per step, each prompt's keys
and values kept once for all the rows sampled after it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mia_fast.ops.token_stats import StreamedTokenStats
from mia_fast.pipeline.attention import flash_available, flash_varlen_attention, segment_attention
from mia_fast.pipeline.device import to_device

LLAMA_FAMILY = frozenset({"llama", "mistral", "qwen2"})
PACKED_MODEL_TYPES = LLAMA_FAMILY | {"gpt_neox"}
# gpt_neox's activations, as oneDNN's GELU epilogue and torch's gelu name their formula.
_GELUS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
# The products' row count oneDNN lays the weights out for; any row count works, this one is typical.
_PACKING_ROWS = 1024
# Output-head rows projected at once on CPU: a chunk's weight and logits stay in cache while they are reduced.
HEAD_CHUNK_IDS = 4096
# Prefixes whose keys and values a decoder keeps (at most max_length / 2 ids each; 46 KB per id for SmolLM2-135M).
KEPT_CONTEXTS = 8

Attention = Callable[..., torch.Tensor]


def head_dim(config) -> int:
    """The dims per attention head of a model's config."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def packed_unsupported(model: torch.nn.Module, max_length: int) -> str | None:
    """Why ``model`` cannot run packed with windows of ``max_length`` ids; None when it can."""
    config = model.config
    if config.model_type not in PACKED_MODEL_TYPES:
        return f"model type {config.model_type!r} is not one of {', '.join(sorted(PACKED_MODEL_TYPES))}"
    activation = getattr(config, "hidden_act", "silu")
    if config.model_type == "gpt_neox":
        if activation not in _GELUS:
            return f"activation {activation!r} is not one of {', '.join(_GELUS)}"
        return None
    if activation != "silu":
        return f"activation {activation!r} is not silu"
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
    """x -> x @ weight.T + bias. With ``reorder`` on a CPU with oneDNN the weight is copied once into its blocked
    layout, and in fp32 what follows a product (an activation, a product or a sum with another tensor of its shape)
    runs in oneDNN's epilogue, on each tile while it is in cache, instead of another pass over the output. In bf16 the
    epilogues moved the built-in model's losses further from fp32 (largest deviation 1.2e-2 against 8.1e-3 over 32
    texts), so there they stay separate ops. Without ``reorder`` the model's own weight is used as it is."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, reorder: bool) -> None:
        self.weight = weight.detach()
        self.bias = bias.detach() if bias is not None else None
        self.onednn = reorder and self.weight.device.type == "cpu" and torch.backends.mkldnn.is_available()
        self.epilogues = self.onednn and self.weight.dtype == torch.float32
        if self.onednn:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(self.weight.contiguous(), _PACKING_ROWS)
            self.bias = self.bias.contiguous() if self.bias is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.onednn:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def activated(self, x: torch.Tensor, activation: str) -> torch.Tensor:
        """activation(x @ weight.T + bias): ``silu``, or a GELU of :data:`_GELUS`."""
        if activation == "silu":
            if self.epilogues:
                return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "swish", [], "")
            return F.silu(self(x))
        if self.epilogues:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "gelu", [], _GELUS[activation])
        return F.gelu(self(x), approximate=_GELUS[activation])

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


def _linear(module: torch.nn.Linear, reorder: bool, rows: torch.Tensor | None = None) -> _Product:
    """The product of a linear layer; ``rows`` picks and orders its output rows (a copy, so only with ``reorder``)."""
    weight, bias = module.weight, module.bias
    if rows is not None:
        weight, bias = weight[rows], None if bias is None else bias[rows]
    return _Product(weight, bias, reorder)


def _fused(modules: Sequence[torch.nn.Linear], rows: Sequence[torch.Tensor | None], reorder: bool) -> _Product:
    """One product for several linear layers (a copy of their weights), each layer's output rows ordered by
    ``rows`` (None: as they are)."""
    weights = [m.weight if order is None else m.weight[order] for m, order in zip(modules, rows)]
    if any(m.bias is None for m in modules):
        return _Product(torch.cat(weights), None, reorder)
    biases = [m.bias if order is None else m.bias[order] for m, order in zip(modules, rows)]
    return _Product(torch.cat(weights), torch.cat(biases), reorder)


@dataclass(frozen=True)
class _Shape:
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
class _QKV:
    """q [n, heads, D], k and v [n, kv_heads, D] of the normed input: from three products (the model's own weights),
    or one whose output is q, k and v side by side, or one whose output holds each head's q, k and v in turn
    (``per_head``, gpt_neox's own layout)."""

    products: tuple[_Product, ...]
    shape: _Shape
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


class _Norm:
    """RMS norm (the Llama family) or LayerNorm with its bias (gpt_neox), in fp32."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.weight = module.weight.detach().float()
        self.layer_norm = isinstance(module, torch.nn.LayerNorm)
        bias = getattr(module, "bias", None) if self.layer_norm else None
        self.bias = bias.detach().float() if bias is not None else None
        self.eps = module.eps if self.layer_norm else getattr(module, "variance_epsilon", None) or module.eps

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.layer_norm:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        return (x * torch.rsqrt(x.square().mean(-1, keepdim=True).add_(self.eps))).mul_(self.weight)


@dataclass(frozen=True)
class _GatedMLP:
    """down(up(x) * SiLU(gate(x))): the Llama family's."""

    gate: _Product
    up: _Product
    down: _Product

    def added_to(self, normed: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        return self.down.added_to(self.up.times(normed, self.gate.activated(normed, "silu")), total)


@dataclass(frozen=True)
class _PlainMLP:
    """down(GELU(up(x))): gpt_neox's."""

    up: _Product
    down: _Product
    activation: str

    def added_to(self, normed: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        return self.down.added_to(self.up.activated(normed, self.activation), total)


@dataclass(frozen=True)
class _Layer:
    """One decoder layer. ``parallel``: attention and MLP both read the layer's input (gpt_neox's parallel residual);
    otherwise the MLP reads the input plus the attention's output."""

    input_norm: _Norm
    qkv: _QKV
    out: _Product
    post_norm: _Norm
    mlp: _GatedMLP | _PlainMLP
    parallel: bool


def _llama_layer(layer: torch.nn.Module, shape: _Shape, reorder: bool) -> _Layer:
    attention, mlp = layer.self_attn, layer.mlp
    projections = (attention.q_proj, attention.k_proj, attention.v_proj)
    if reorder:
        rows = [shape.paired(shape.heads), shape.paired(shape.kv_heads), None]
        qkv = _QKV((_fused(projections, rows, reorder),), shape)
    else:
        qkv = _QKV(tuple(_linear(m, reorder) for m in projections), shape)
    return _Layer(
        input_norm=_Norm(layer.input_layernorm),
        qkv=qkv,
        out=_linear(attention.o_proj, reorder),
        post_norm=_Norm(layer.post_attention_layernorm),
        mlp=_GatedMLP(_linear(mlp.gate_proj, reorder), _linear(mlp.up_proj, reorder), _linear(mlp.down_proj, reorder)),
        parallel=False,
    )


def _neox_layer(layer: torch.nn.Module, shape: _Shape, reorder: bool, activation: str) -> _Layer:
    attention, mlp = layer.attention, layer.mlp
    if reorder:
        # The model's rows hold each head's q, k and v in turn: gathered into all q, all k, all v, each paired.
        heads, head_dim = shape.heads, shape.head_dim
        head_starts = (torch.arange(heads) * 3 * head_dim).repeat_interleave(head_dim)
        within = shape.paired(heads) - torch.arange(heads).repeat_interleave(head_dim) * head_dim
        plain = torch.arange(head_dim).repeat(heads)
        rows = torch.cat([head_starts + within, head_starts + head_dim + within, head_starts + 2 * head_dim + plain])
        qkv = _QKV((_linear(attention.query_key_value, reorder, rows),), shape)
    else:
        qkv = _QKV((_linear(attention.query_key_value, reorder),), shape, per_head=True)
    return _Layer(
        input_norm=_Norm(layer.input_layernorm),
        qkv=qkv,
        out=_linear(attention.dense, reorder),
        post_norm=_Norm(layer.post_attention_layernorm),
        mlp=_PlainMLP(_linear(mlp.dense_h_to_4h, reorder), _linear(mlp.dense_4h_to_h, reorder), activation),
        parallel=layer.use_parallel_residual,
    )


@dataclass(frozen=True, eq=False)
class SharedContext:
    """A prefix's keys (rotated) and values at every layer, each [length, kv_heads, head_dim] in the attention's dtype:
    computed once by :meth:`PackedDecoder.context`, then attended to by every sequence placed after it, whatever its
    batch."""

    length: int
    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class _Packing:
    """Where packed sequences sit, for every layer of one forward: each token's position, the queries' and keys'
    segment offsets (on the device for flash attention, on the host for the reference), and, where a sequence follows
    a context, the contexts whose keys precede the packed ones and each segment's keys among them (``key_slots``)."""

    positions: torch.Tensor
    cu_seq_q: torch.Tensor
    cu_seq_k: torch.Tensor
    max_q: int
    max_k: int
    contexts: tuple[SharedContext, ...]
    key_slots: torch.Tensor | None


class PackedDecoder:
    """The final-normed hidden states of packed sequences: ``hidden(ids, lengths)``.

    Rows of ``ids`` are the sequences' ids end to end; each sequence starts at position 0. The result
    is fp32 whatever the model's dtype. Built from a loaded model's modules; the model itself is left as it was.
    ``reorder`` (default: on a CPU) copies the weights once into fused, reordered ones; ``attention`` is a function of
    ``varlen_attn``'s signature (default: flash attention where it runs, else the reference).
    """

    def __init__(
        self, model: torch.nn.Module, *, reorder: bool | None = None, attention: Attention | None = None
    ) -> None:
        self.source = self.stamp(model)
        config = model.config
        base = model.base_model
        parameter = next(model.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device
        reorder = self.device.type == "cpu" if reorder is None else reorder
        neox = config.model_type == "gpt_neox"
        self.embed = base.embed_in if neox else base.embed_tokens
        self.rotary = base.rotary_emb
        heads, dims = config.num_attention_heads, head_dim(config)
        cos, _ = self.rotary(
            torch.zeros(1, device=self.device), torch.zeros((1, 1), dtype=torch.long, device=self.device)
        )
        self.shape = _Shape(heads, getattr(config, "num_key_value_heads", None) or heads, dims, cos.shape[-1])
        self.paired = reorder  # the rotary layout the weights were ordered for
        if attention is None:
            flash = flash_available(self.device, self.dtype, dims)
            attention = flash_varlen_attention if flash else segment_attention
        self.attention = attention
        self.attention_dtype = self.dtype if attention is flash_varlen_attention else torch.float32
        self.final_norm = _Norm(base.final_layer_norm if neox else base.norm)
        self._contexts: dict[tuple[int, ...], SharedContext] = {}
        if neox:
            activation = config.hidden_act
            self.layers = [_neox_layer(layer, self.shape, reorder, activation) for layer in base.layers]
        else:
            self.layers = [_llama_layer(layer, self.shape, reorder) for layer in base.layers]
        head = model.get_output_embeddings()
        chunk = HEAD_CHUNK_IDS if reorder else head.weight.shape[0]
        self.head_chunks = [
            (
                start,
                _Product(
                    head.weight[start : start + chunk],
                    None if head.bias is None else head.bias[start : start + chunk],
                    reorder,
                ),
            )
            for start in range(0, head.weight.shape[0], chunk)
        ]

    @property
    def heads(self) -> int:
        return self.shape.heads

    @property
    def kv_heads(self) -> int:
        return self.shape.kv_heads

    @property
    def head_dim(self) -> int:
        return self.shape.head_dim

    @staticmethod
    def stamp(model: torch.nn.Module) -> tuple[tuple[int, int], ...]:
        """Which parameter tensors the model holds and how often each was changed in place: an optimizer step or
        a move to another dtype changes it, and the copies made from the model are then stale."""
        return tuple((id(p), p._version) for p in model.parameters())

    @torch.inference_mode()
    def hidden(
        self, ids: torch.Tensor, lengths: Sequence[int], contexts: Sequence[SharedContext | None] | None = None
    ) -> torch.Tensor:
        """The final-normed hidden states [ids, H] of the packed sequences, each after ``contexts[i]`` (None: none)."""
        return self.final_norm(self._forward(ids, lengths, contexts or [None] * len(lengths)))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head's logits [n, vocab], in the model's dtype as its own forward gives them, at final-normed
        ``hidden`` [n, H]."""
        hidden = hidden.to(self.dtype)
        return torch.cat([project(hidden) for _, project in self.head_chunks], dim=1)

    def context(self, ids: Sequence[int]) -> SharedContext:
        """The keys and values of a prefix's ``ids``, computed the first time and kept (the latest
        ``KEPT_CONTEXTS``) for every later sequence placed after the same ids."""
        key = tuple(ids)
        found = self._contexts.pop(key, None)
        if found is None:
            kept: list[tuple[torch.Tensor, torch.Tensor]] = []
            with torch.inference_mode():
                self._forward(torch.tensor(key), [len(key)], [None], kept)
            found = SharedContext(
                len(key), *(tuple(t.to(self.attention_dtype).contiguous() for t in part) for part in zip(*kept))
            )
        self._contexts[key] = found
        while len(self._contexts) > KEPT_CONTEXTS:
            del self._contexts[next(iter(self._contexts))]
        return found

    def decoding(self, prompts: Sequence[Sequence[int]], samples: Sequence[int], new_tokens: int) -> PackedDecoding:
        """``samples[p]`` rows decoding up to ``new_tokens`` tokens after each prompt ``prompts[p]``, each prompt run
        once: see :class:`PackedDecoding`."""
        return PackedDecoding(self, prompts, samples, new_tokens)

    def _packing(self, lengths: Sequence[int], contexts: Sequence[SharedContext | None]) -> _Packing:
        """The packing of sequences of ``lengths`` after ``contexts``, laid out on the host and copied to the device
        in one transfer."""
        distinct = list({id(c): c for c in contexts if c is not None}.values())
        context_starts = dict(zip(map(id, distinct), itertools.accumulate([0, *(c.length for c in distinct)])))
        own_start = sum(c.length for c in distinct)
        context_lengths = np.array([c.length if c is not None else 0 for c in contexts], dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        positions = np.concatenate([np.arange(n) + c for n, c in zip(lengths, context_lengths)] or [np.zeros(0)])
        cu_seq_q, cu_seq_k = starts, np.concatenate([[0], np.cumsum(lengths + context_lengths)])
        parts = [positions.astype(np.int64), cu_seq_q, cu_seq_k]
        if distinct:
            parts.append(
                np.concatenate(
                    [
                        np.concatenate(
                            [
                                np.arange(c.length) + context_starts[id(c)] if c is not None else np.zeros(0, np.int64),
                                own_start + starts[i] + np.arange(lengths[i]),
                            ]
                        )
                        for i, c in enumerate(contexts)
                    ]
                ).astype(np.int64)
            )
        on_device = to_device(torch.from_numpy(np.concatenate(parts)), self.device).split([len(p) for p in parts])
        on_host = self.attention is segment_attention
        return _Packing(
            positions=on_device[0],
            # Flash attention takes int32 offsets: cast once here, not in every layer.
            cu_seq_q=torch.from_numpy(cu_seq_q) if on_host else on_device[1].int(),
            cu_seq_k=torch.from_numpy(cu_seq_k) if on_host else on_device[2].int(),
            max_q=int(lengths.max(initial=0)),
            max_k=int((lengths + context_lengths).max(initial=0)),
            contexts=tuple(distinct),
            key_slots=on_device[3] if distinct else None,
        )

    def _forward(
        self,
        ids: torch.Tensor,
        lengths: Sequence[int],
        contexts: Sequence[SharedContext | None],
        kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """The residual stream after the last layer; each layer's keys and values [ids, kv_heads, head_dim] (fp32,
        keys rotated) appended to ``kept`` if given."""
        packing = self._packing(lengths, contexts)
        grouped = self.kv_heads != self.heads

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if kept is not None:
                kept.append((k, v.float()))
            q, k, v = (t.to(self.attention_dtype) for t in (q, k, v))
            if packing.key_slots is not None:
                k, v = (
                    torch.cat([*(getattr(c, part)[index] for c in packing.contexts), t]).index_select(
                        0, packing.key_slots
                    )
                    for part, t in (("keys", k), ("values", v))
                )
            out = self.attention(
                q,
                k,
                v,
                packing.cu_seq_q,
                packing.cu_seq_k,
                packing.max_q,
                packing.max_k,
                enable_gqa=grouped,
            )
            return out.reshape(out.shape[0], -1)

        return self._layers(to_device(ids, self.device), packing.positions, attend)

    def _layers(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The residual stream after the last layer of the tokens ``ids`` at ``positions``, ``attend(layer, q, k, v)``
        giving each layer's attention output [ids, heads x head_dim] of its q [ids, heads, head_dim], k and v [ids,
        kv_heads, head_dim] (q and k rotated, in fp32; v in the model's dtype)."""
        x = self.embed(ids).float()
        cos, sin = self.rotary(x, positions.unsqueeze(0))
        half = self.shape.rotary_dims // 2
        cos, sin = cos[0, :, :half].float().unsqueeze(1), sin[0, :, :half].float().unsqueeze(1)
        turn = torch.complex(cos, sin) if self.paired else None

        def rotate(t: torch.Tensor) -> torch.Tensor:
            t = t.float()
            turned, rest = t[..., : 2 * half], t[..., 2 * half :]
            if turn is not None:
                turned = torch.view_as_real(torch.view_as_complex(turned.unflatten(-1, (half, 2))) * turn).flatten(-2)
            else:
                first, second = turned[..., :half], turned[..., half:]
                turned = torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
            return torch.cat([turned, rest], dim=-1) if rest.shape[-1] else turned

        for index, layer in enumerate(self.layers):
            q, k, v = layer.qkv(layer.input_norm(x).to(self.dtype))
            attended = attend(index, rotate(q), rotate(k), v).to(self.dtype)
            mlp_input = layer.post_norm(x).to(self.dtype) if layer.parallel else None
            x = layer.out.added_to(attended, x)
            if mlp_input is None:
                mlp_input = layer.post_norm(x).to(self.dtype)
            x = layer.mlp.added_to(mlp_input, x)
        return x

    @torch.inference_mode()
    def token_stats(
        self, hidden: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logp, mu, var, max_logp) of the output head's logits at ``hidden`` [n, H] (fp32) for ``targets`` [n], a
        vocabulary chunk at a time (the CPU's head: on a GPU the engine reduces the logits with the Triton kernels)."""
        stats = StreamedTokenStats(targets)
        hidden = hidden.to(self.dtype)
        for start, project in self.head_chunks:
            stats.add(project(hidden), start)
        return stats.result()


def attention_with_lse(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of query [B, H, L, D] to key and value [B, H, S, D] (no mask but ``bias`` [B, 1, 1, S], -inf where a
    key is hidden), fp32: the output [B, H, L, D] and each query's log-sum-exp [B, H, L] of its scores, to merge
    attentions split over key sets. On CPU torch's flash attention for CPU, else :func:`plain_attention_with_lse`."""
    if query.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, False, attn_mask=bias)
    return plain_attention_with_lse(query, key, value, bias)


def plain_attention_with_lse(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention_with_lse` in plain products, on any device (a decoding step's few queries per row)."""
    scores = torch.matmul(query, key.transpose(-1, -2)).mul_(query.shape[-1] ** -0.5)
    if bias is not None:
        scores.add_(bias)
    lse = scores.logsumexp(-1)
    return torch.matmul(scores.sub_(lse.unsqueeze(-1)).exp_(), value), lse


class PackedDecoding:
    """Rows sampled after prompts, decoded a token a step through a :class:`PackedDecoder`: ``samples[p]``
    consecutive rows follow prompt p, and each row draws up to ``new_tokens`` tokens.

    The prompts run once, packed; their last logits give each row's first draw (:attr:`logits`). A prompt's keys
    and values are kept once, not once per row: a row's attention is split in two, its prompt's part computed for
    all the rows of that prompt at once, its own tokens' part row by row, and the two merged by their log-sum-exps.
    Every row of a step reads its prompt's keys once per prompt, so a step moves about a tenth of the memory a
    cache copied into every row would (10 samples), and the generated slots are one allocation for the batch."""

    def __init__(
        self, decoder: PackedDecoder, prompts: Sequence[Sequence[int]], samples: Sequence[int], new_tokens: int
    ) -> None:
        self.decoder = decoder
        device = decoder.device
        lengths = [len(p) for p in prompts]
        width, total = max(lengths), sum(lengths)
        self.row_prompt = torch.repeat_interleave(torch.arange(len(prompts)), torch.tensor(samples)).to(device)
        starts = [0, *itertools.accumulate(lengths)]
        # Each prompt's ids padded to the widest; a pad slot takes the zero row appended after the packed ids.
        gather = torch.full((len(prompts), width), total, dtype=torch.long)
        for p, n in enumerate(lengths):
            gather[p, :n] = torch.arange(starts[p], starts[p + 1])
        gather = gather.reshape(-1).to(device)
        kept: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.inference_mode():
            ids = torch.tensor([t for p in prompts for t in p])
            x = decoder._forward(ids, lengths, [None] * len(prompts), kept)
            last = torch.tensor(starts[1:], device=device) - 1
            self.logits = decoder.logits(decoder.final_norm(x.index_select(0, last))).index_select(0, self.row_prompt)

            def padded(t: torch.Tensor) -> torch.Tensor:
                rows = torch.cat([t, t.new_zeros(1, *t.shape[1:])]).index_select(0, gather)
                return rows.view(len(prompts), width, *t.shape[1:]).transpose(1, 2).contiguous()

            self.prompt_keys = [padded(k) for k, _ in kept]
            self.prompt_values = [padded(v) for _, v in kept]
        self.prompt_bias = torch.zeros((len(prompts), 1, 1, width), device=device)
        for p, n in enumerate(lengths):
            self.prompt_bias[p, ..., n:] = -torch.inf
        shape = (len(self.row_prompt), decoder.kv_heads, new_tokens, decoder.head_dim)
        self.keys = [torch.empty(shape, device=device) for _ in kept]
        self.values = [torch.empty(shape, device=device) for _ in kept]
        self.generated = 0
        self.positions = torch.tensor(lengths, device=device).index_select(0, self.row_prompt)
        self._group_rows()

    def _group_rows(self) -> None:
        """Lays the batch's rows out [prompt, sample] (``members``, a missing sample taking row 0) for the prompts'
        part of the attention, and where each row sits in that layout (``row_slot``)."""
        counts = torch.bincount(self.row_prompt, minlength=len(self.prompt_bias))
        self.most_samples = int(counts.max())
        first_row = counts.cumsum(0) - counts
        rank = torch.arange(len(self.row_prompt), device=counts.device) - first_row[self.row_prompt]
        self.row_slot = self.row_prompt * self.most_samples + rank
        self.members = torch.zeros(len(counts) * self.most_samples, dtype=torch.long, device=counts.device)
        self.members[self.row_slot] = torch.arange(len(self.row_prompt), device=counts.device)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps the rows ``rows`` (int64, increasing) of the batch, in that order, in place; a prompt left with
        no row is dropped."""
        count, filled = rows.numel(), self.generated
        for cache in (*self.keys, *self.values):
            cache[:count, :, :filled] = cache[rows, :, :filled]
        self.keys = [k[:count] for k in self.keys]
        self.values = [v[:count] for v in self.values]
        self.positions = self.positions[rows]
        prompts, self.row_prompt = torch.unique(self.row_prompt[rows], return_inverse=True)
        if len(prompts) < len(self.prompt_bias):
            self.prompt_keys = [k[prompts] for k in self.prompt_keys]
            self.prompt_values = [v[prompts] for v in self.prompt_values]
            self.prompt_bias = self.prompt_bias[prompts]
        self._group_rows()

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The logits [rows, vocab] after each row's next token ``tokens`` [rows]."""
        decoder, slot = self.decoder, self.generated
        rows, prompts = len(tokens), len(self.prompt_bias)
        kv_heads, group, head_dim = decoder.kv_heads, decoder.heads // decoder.kv_heads, decoder.head_dim

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = self.keys[index], self.values[index]
            keys[:, :, slot] = k
            values[:, :, slot] = v
            by_prompt = q.index_select(0, self.members).view(prompts, self.most_samples, kv_heads, group, head_dim)
            out_prompt, lse_prompt = attention_with_lse(
                by_prompt.transpose(1, 2).reshape(prompts, kv_heads, -1, head_dim),
                self.prompt_keys[index],
                self.prompt_values[index],
                self.prompt_bias,
            )
            out_prompt = out_prompt.view(prompts, kv_heads, self.most_samples, group, head_dim).transpose(1, 2)
            out_prompt = out_prompt.reshape(-1, kv_heads, group, head_dim).index_select(0, self.row_slot)
            lse_prompt = lse_prompt.view(prompts, kv_heads, self.most_samples, group).transpose(1, 2)
            lse_prompt = lse_prompt.reshape(-1, kv_heads, group).index_select(0, self.row_slot)
            out_own, lse_own = attention_with_lse(
                q.view(rows, kv_heads, group, head_dim), keys[:, :, : slot + 1], values[:, :, : slot + 1]
            )
            lse = torch.logaddexp(lse_prompt, lse_own)
            out = out_prompt.mul_((lse_prompt - lse).exp_().unsqueeze(-1))
            return out.add_(out_own.mul_((lse_own - lse).exp_().unsqueeze(-1))).view(rows, -1)

        x = decoder._layers(tokens, self.positions, attend)
        self.generated += 1
        self.positions = self.positions + 1
        return decoder.logits(decoder.final_norm(x))
