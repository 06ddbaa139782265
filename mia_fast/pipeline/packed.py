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

Sampling decodes through the same layers (:class:`PackedDecoding`): a token per row per step, each prompt's keys
and values kept once for all the rows sampled after it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
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
        return self._final_norm(self._forward(ids, lengths, contexts or [None] * len(lengths)))

    def _final_norm(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(self._inverse_rms(x)).mul_(self.final_norm)

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
                self._forward(torch.tensor(key, device=self.final_norm.device), [len(key)], [None], kept)
            found = SharedContext(
                len(key), *(tuple(t.transpose(0, 1).unsqueeze(0).contiguous() for t in part) for part in zip(*kept))
            )
        self._contexts[key] = found
        while len(self._contexts) > KEPT_CONTEXTS:
            del self._contexts[next(iter(self._contexts))]
        return found

    def decoding(self, prompts: Sequence[Sequence[int]], samples: Sequence[int], new_tokens: int) -> PackedDecoding:
        """``samples[p]`` rows decoding up to ``new_tokens`` tokens after each prompt ``prompts[p]``, each prompt run
        once: see :class:`PackedDecoding`."""
        return PackedDecoding(self, prompts, samples, new_tokens)

    def _forward(
        self,
        ids: torch.Tensor,
        lengths: Sequence[int],
        contexts: Sequence[SharedContext | None],
        kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """The residual stream after the last layer; each layer's keys and values [ids, kv_heads, head_dim] (keys
        rotated) appended to ``kept`` if given."""
        device = ids.device
        positions = torch.cat(
            [torch.arange(n, device=device) + (c.length if c is not None else 0) for n, c in zip(lengths, contexts)]
        )
        groups = _attention_groups(lengths, contexts, device)
        attended = torch.empty(int(ids.shape[0]), self.heads * self.head_dim, device=device)

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if kept is not None:
                kept.append((k, v))
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
                attended[group.tokens] = out.transpose(1, 2).reshape(-1, attended.shape[1]).index_select(0, group.slots)
            return attended

        return self._layers(ids, positions, attend)

    def _layers(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """The residual stream after the last layer of the tokens ``ids`` at ``positions``, ``attend(layer, q, k, v)``
        giving each layer's attention output [ids, heads x head_dim] (fp32) of its q [ids, heads, head_dim], k and
        v [ids, kv_heads, head_dim] (fp32, q and k rotated)."""
        total = int(ids.shape[0])
        x = self.embed(ids).float()
        half = self.head_dim // 2
        cos, sin = self.rotary(x, positions.unsqueeze(0))
        turn = torch.complex(cos[0, :, :half].float(), sin[0, :, :half].float()).unsqueeze(1)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim

        def rotate(t: torch.Tensor) -> torch.Tensor:
            pairs = torch.view_as_complex(t.float().unflatten(-1, (half, 2)))
            return torch.view_as_real(pairs * turn).flatten(-2)

        for index, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(x, layer.input_norm))
            q = rotate(qkv[:, :q_size].view(total, self.heads, self.head_dim))
            k = rotate(qkv[:, q_size : q_size + kv_size].view(total, self.kv_heads, self.head_dim))
            v = qkv[:, q_size + kv_size :].float().view(total, self.kv_heads, self.head_dim)
            x = layer.out.added_to(attend(index, q, k, v).to(self.dtype), x)
            normed = self._norm(x, layer.post_norm)
            x = layer.down.added_to(layer.up.times(normed, layer.gate.silu(normed)), x)
        return x

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
        device = decoder.final_norm.device
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
            ids = torch.tensor([t for p in prompts for t in p], device=device)
            x = decoder._forward(ids, lengths, [None] * len(prompts), kept)
            last = torch.tensor(starts[1:], device=device) - 1
            self.logits = decoder.logits(decoder._final_norm(x.index_select(0, last))).index_select(0, self.row_prompt)

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
        attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            keys, values = self.keys[index], self.values[index]
            keys[:, :, slot] = k
            values[:, :, slot] = v
            by_prompt = q.index_select(0, self.members).view(prompts, self.most_samples, kv_heads, group, head_dim)
            out_prompt, lse_prompt = attention(
                by_prompt.transpose(1, 2).reshape(prompts, kv_heads, -1, head_dim),
                self.prompt_keys[index],
                self.prompt_values[index],
                0.0,
                False,
                attn_mask=self.prompt_bias,
            )
            out_prompt = out_prompt.view(prompts, kv_heads, self.most_samples, group, head_dim).transpose(1, 2)
            out_prompt = out_prompt.reshape(-1, kv_heads, group, head_dim).index_select(0, self.row_slot)
            lse_prompt = lse_prompt.view(prompts, kv_heads, self.most_samples, group).transpose(1, 2)
            lse_prompt = lse_prompt.reshape(-1, kv_heads, group).index_select(0, self.row_slot)
            out_own, lse_own = attention(
                q.view(rows, kv_heads, group, head_dim), keys[:, :, : slot + 1], values[:, :, : slot + 1], 0.0, False
            )
            lse = torch.logaddexp(lse_prompt, lse_own)
            out = out_prompt.mul_((lse_prompt - lse).exp_().unsqueeze(-1))
            return out.add_(out_own.mul_((lse_own - lse).exp_().unsqueeze(-1))).view(rows, -1)

        x = decoder._layers(tokens, self.positions, attend)
        self.generated += 1
        self.positions = self.positions + 1
        return decoder.logits(decoder._final_norm(x))
