"""A pad-free forward of decoders for scoring: the final hidden states of many sequences at once, each as the model
alone would give it (in fp32 within 1e-5 of its own forward). Each model family it runs is one file of
:mod:`mia_fast.pipeline.families` (today the Llama family: llama, mistral, qwen2; and gpt_neox), on every device.

Why not the model's own forward: it pads a batch's rows to the longest and attends under a padding mask. Here a
batch's rows are packed end to end, every product runs on real tokens only, and the attention runs over the packed
sequences' offsets (:mod:`mia_fast.pipeline.attention`: torch's flash ``varlen_attn`` on a GPU, the segment-wise
reference elsewhere, through the family's sliding window where a layer has one), each sequence alone.

Weights. On a CPU every weight is copied once into oneDNN's blocked layout (measured 1.1-1.3x faster products than
``F.linear`` on the same weights), q, k and v into one product, their rows ordered so that the rotary embedding turns
each pair of dims by a complex product (3-4x faster than the two halves' formula on CPU), and in fp32 what follows a
product (SiLU or GELU, the gate's product, the residual sums) runs in oneDNN's epilogues (:class:`Product`).
Elsewhere (``reorder=False``, a GPU) no weight is copied: the products read the model's own weights, so a 16 GB model
stays 16 GB, and the rotary embedding turns the two halves of each head as the model does, in place.

Precision and bytes. The residual stream stays in the model's dtype, as the model keeps it, so that outside the
products and the attention a layer moves no more bytes than the model's own forward (on a GPU that traffic is a few
percent of a layer's time; ``benchmarks/layer_bytes.py`` counts it: Llama-3-8B's shape in bf16, 0.43x the model's
bytes per token and 3 casts against its 9). Norms run in fp32 and round once to the model's dtype (on a GPU as one
fused op); the rotary embedding turns q and k in the model's dtype (the paired layout by a complex product in fp32,
for the fp32 attention). So bf16 hidden states are as close to fp32 as the model's own bf16 forward. The attention
runs in fp32 through the reference (on CPU torch's fp32 flash attention is faster than its bf16 one at these sizes,
and exact), in the model's dtype through flash attention.

A sequence may follow a shared context (a pass's prefix, the same before every text): its keys and values are
computed once (:meth:`PackedDecoder.context`) and every sequence after it attends to them, its own positions
starting where the context ends.

Sampling decodes through the same layers (:class:`mia_fast.pipeline.decoding.PackedDecoding`): a token per row per
step, each prompt's keys and values kept once for all the rows sampled after it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from mia_fast.ops.token_stats import StreamedTokenStats
from mia_fast.pipeline.attention import AttentionBackend, Segments, attention_backend
from mia_fast.pipeline.device import copies_weights, to_device, torch_internal
from mia_fast.pipeline.families import FAMILIES, family_of
from mia_fast.pipeline.packed_layers import HeadShape, Norm, Product
from mia_fast.pipeline.rotary import frequency_group, length_dependent, rotary_by_sequence

# Output-head rows projected at once on CPU: a chunk's weight and logits stay in cache while they are reduced.
HEAD_CHUNK_IDS = 4096
# Prefixes whose keys and values a decoder keeps (at most max_length / 2 ids each; 46 KB per id for SmolLM2-135M).
KEPT_CONTEXTS = 8


def head_dim(config) -> int:
    """The dims per attention head of a model's config."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def packed_unsupported(model: torch.nn.Module, max_length: int) -> str | None:
    """Why ``model`` cannot run packed with windows of ``max_length`` ids; None when it can."""
    config = model.config
    family = family_of(config.model_type)
    if family is None:
        return f"model type {config.model_type!r} is not one of {', '.join(sorted(FAMILIES))}"
    return family.refuses(config, max_length)


def _turn_paired(turn: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """q or k [n, heads, D] with each pair of rotary dims side by side (:meth:`HeadShape.paired`) turned by the
    complex ``turn`` [n, 1, rotary_dims / 2]: a new fp32 tensor (the CPU's layout, whose attention runs in fp32)."""
    half = turn.shape[-1]
    wide = t.float()
    turned = torch.view_as_real(torch.view_as_complex(wide[..., : 2 * half].unflatten(-1, (half, 2))) * turn)
    if wide.shape[-1] > 2 * half:
        return torch.cat([turned.flatten(-2), wide[..., 2 * half :]], dim=-1)
    return turned.flatten(-2)


def _turn_halves(cos: torch.Tensor, sin: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """q or k [n, heads, D] turned in place, as the model turns it (dim j with dim j + rotary_dims / 2 of each head),
    by ``cos`` and ``sin`` [n, 1, rotary_dims / 2] in t's dtype: the two halves rewritten where they lie, one spare
    half, the dims past the rotary ones untouched (the model's formula writes the head three times over)."""
    half = cos.shape[-1]
    first, second = t[..., :half], t[..., half : 2 * half]
    spare = first * sin
    first.mul_(cos).addcmul_(second, sin, value=-1)
    second.mul_(cos).add_(spare)
    return t


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
    segments: Segments
    contexts: tuple[SharedContext, ...]
    key_slots: torch.Tensor | None
    sequence_lengths: torch.Tensor | None


class PackedDecoder:
    """The final-normed hidden states of packed sequences: ``hidden(ids, lengths)``.

    Rows of ``ids`` are the sequences' ids end to end; each sequence starts at position 0. The result is in the
    model's dtype, as its own ``last_hidden_state``. Built from a loaded model's modules by its family's spec
    (:mod:`mia_fast.pipeline.families`); the model itself is left as it was. ``reorder`` (default: on a CPU) copies
    the weights once into fused, reordered ones; ``attention`` is the attention it runs (default: flash attention
    where it runs, else the reference); ``residual_dtype`` the residual stream's (default: the model's; fp32 keeps a
    16-bit model's sums of layer outputs unrounded, where bytes cost nothing measurable: a CPU); an engine builds it
    from its forward path (:meth:`mia_fast.pipeline.forward_path.ForwardPath.decoder`), which decided all three.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        reorder: bool | None = None,
        attention: AttentionBackend | None = None,
        residual_dtype: torch.dtype | None = None,
    ) -> None:
        self.source = self.stamp(model)
        config = model.config
        family = family_of(config.model_type)
        base = model.base_model
        parameter = next(model.parameters())
        self.dtype, self.device = parameter.dtype, parameter.device
        self.residual_dtype = residual_dtype or self.dtype
        reorder = copies_weights(self.device) if reorder is None else reorder
        self.embed = getattr(base, family.embedding)
        self.rotary = getattr(base, family.rotary)
        heads, dims = config.num_attention_heads, head_dim(config)
        cos, _ = self.rotary(
            torch.zeros(1, device=self.device), torch.zeros((1, 1), dtype=torch.long, device=self.device)
        )
        self.shape = HeadShape(heads, getattr(config, "num_key_value_heads", None) or heads, dims, cos.shape[-1])
        self.paired = reorder  # the rotary layout the weights were ordered for
        self.attention = attention or attention_backend(self.device, self.dtype, dims)
        self.attention_dtype = self.dtype if self.attention.in_model_dtype else torch.float32
        self.final_norm = Norm(getattr(base, family.final_norm), fused=not reorder)
        self._contexts: dict[tuple[int, ...], SharedContext] = {}
        self.layers = [family.layer(layer, self.shape, config, reorder=reorder) for layer in base.layers]
        self.windows = [family.window(config, index) for index in range(len(self.layers))]
        head = model.get_output_embeddings()
        chunk = HEAD_CHUNK_IDS if reorder else head.weight.shape[0]
        self.head_chunks = [
            (
                start,
                Product(
                    head.weight[start : start + chunk],
                    None if head.bias is None else head.bias[start : start + chunk],
                    reorder=reorder,
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
        return tuple((id(p), torch_internal(p, "_version")) for p in model.parameters())

    @torch.inference_mode()
    def hidden(
        self, ids: torch.Tensor, lengths: Sequence[int], contexts: Sequence[SharedContext | None] | None = None
    ) -> torch.Tensor:
        """The final-normed hidden states [ids, H] of the packed sequences, each after ``contexts[i]`` (None: none)."""
        return self.final_norm(self.residual(ids, lengths, contexts or [None] * len(lengths)))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head's logits [n, vocab], in the model's dtype as its own forward gives them, at final-normed
        ``hidden`` [n, H]."""
        hidden = hidden.to(self.dtype)
        return torch.cat([project(hidden) for _, project in self.head_chunks], dim=1)

    def context(self, ids: Sequence[int], whole_length: int | None = None) -> SharedContext:
        """The keys and values of a prefix's ``ids``, computed the first time and kept (the latest
        ``KEPT_CONTEXTS``) for every later sequence placed after the same ids. Where the rotary embedding's
        frequencies depend on the length (:mod:`mia_fast.pipeline.rotary`), the keys are turned for a sequence of
        ``whole_length`` ids (the prefix and what follows it), and kept for sequences that get the same frequencies."""
        whole = whole_length or len(ids)
        key = (tuple(ids), int(frequency_group(self.rotary, whole)))
        found = self._contexts.pop(key, None)
        if found is None:
            kept: list[tuple[torch.Tensor, torch.Tensor]] = []
            with torch.inference_mode():
                self.residual(torch.tensor(key[0]), [len(ids)], [None], kept, whole_lengths=[whole])
            found = SharedContext(
                len(ids), *(tuple(t.to(self.attention_dtype).contiguous() for t in part) for part in zip(*kept))
            )
        self._contexts[key] = found
        while len(self._contexts) > KEPT_CONTEXTS:
            del self._contexts[next(iter(self._contexts))]
        return found

    def _packing(
        self,
        lengths: Sequence[int],
        contexts: Sequence[SharedContext | None],
        whole_lengths: Sequence[int] | None = None,
    ) -> _Packing:
        """The packing of sequences of ``lengths`` after ``contexts``, laid out on the host and copied to the device
        in one transfer; each token's whole sequence length (``whole_lengths``, default the context's and its own)
        where the rotary embedding's frequencies depend on it."""
        distinct = list({id(c): c for c in contexts if c is not None}.values())
        context_starts = dict(zip(map(id, distinct), itertools.accumulate([0, *(c.length for c in distinct)])))
        own_start = sum(c.length for c in distinct)
        context_lengths = np.array([c.length if c is not None else 0 for c in contexts], dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        positions = np.concatenate([np.arange(n) + c for n, c in zip(lengths, context_lengths)] or [np.zeros(0)])
        cu_seq_q, cu_seq_k = starts, np.concatenate([[0], np.cumsum(lengths + context_lengths)])
        parts = [positions.astype(np.int64), cu_seq_q, cu_seq_k]
        by_length = length_dependent(self.rotary)
        if by_length:
            whole = lengths + context_lengths if whole_lengths is None else np.asarray(whole_lengths, dtype=np.int64)
            parts.append(np.repeat(whole, lengths))
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
        on_host = self.attention.offsets_on_host
        return _Packing(
            positions=on_device[0],
            # Flash attention takes int32 offsets: cast once here, not in every layer.
            segments=Segments(
                torch.from_numpy(cu_seq_q) if on_host else on_device[1].int(),
                torch.from_numpy(cu_seq_k) if on_host else on_device[2].int(),
                int(lengths.max(initial=0)),
                int((lengths + context_lengths).max(initial=0)),
            ),
            contexts=tuple(distinct),
            key_slots=on_device[-1] if distinct else None,
            sequence_lengths=on_device[3] if by_length else None,
        )

    def residual(
        self,
        ids: torch.Tensor,
        lengths: Sequence[int],
        contexts: Sequence[SharedContext | None],
        kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        whole_lengths: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """The residual stream after the last layer; each layer's keys (rotated) and values [ids, kv_heads, head_dim]
        appended to ``kept`` if given (see :meth:`_packing` for ``whole_lengths``)."""
        packing = self._packing(lengths, contexts, whole_lengths)
        grouped = self.kv_heads != self.heads

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            if kept is not None:
                kept.append((k, v))
            q, k, v = (t.to(self.attention_dtype) for t in (q, k, v))
            if packing.key_slots is not None:
                k, v = (
                    torch.cat([*(getattr(c, part)[index] for c in packing.contexts), t]).index_select(
                        0, packing.key_slots
                    )
                    for part, t in (("keys", k), ("values", v))
                )
            out = self.attention.attend(q, k, v, packing.segments, enable_gqa=grouped, window=self.windows[index])
            return out.reshape(out.shape[0], -1)

        return self.run_layers(to_device(ids, self.device), packing.positions, attend, packing.sequence_lengths)

    def run_layers(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        sequence_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The residual stream after the last layer of the tokens ``ids`` at ``positions``, ``attend(layer, q, k, v)``
        giving each layer's attention output [ids, heads x head_dim] of its q [ids, heads, head_dim], k and v [ids,
        kv_heads, head_dim] (q and k rotated: in the model's dtype, fp32 in the paired layout; v in the model's
        dtype). With ``sequence_lengths`` (every
        token's whole sequence length) each token is turned with its own sequence's frequencies, else with those the
        rotary embedding gives the whole call (:mod:`mia_fast.pipeline.rotary`)."""
        x = self.embed(ids).to(self.residual_dtype)
        # The embedding's forward reads only the dtype and device of its first argument.
        like = torch.empty(0, device=x.device)
        if sequence_lengths is None:
            cos, sin = self.rotary(like, positions.unsqueeze(0))
        else:
            cos, sin = rotary_by_sequence(self.rotary, like, positions, sequence_lengths)
        half = self.shape.rotary_dims // 2
        cos, sin = cos[0, :, :half].unsqueeze(1), sin[0, :, :half].unsqueeze(1)
        if self.paired:
            rotate = partial(_turn_paired, torch.complex(cos, sin))
        else:
            rotate = partial(_turn_halves, cos.to(self.dtype), sin.to(self.dtype))
        for index, layer in enumerate(self.layers):
            q, k, v = layer.qkv(layer.input_norm(x))
            attended = attend(index, rotate(q), rotate(k), v).to(self.dtype)
            mlp_input = layer.post_norm(x) if layer.parallel else None
            x = layer.out.added_to(attended, x)
            if mlp_input is None:
                mlp_input = layer.post_norm(x)
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
