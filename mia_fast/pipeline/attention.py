"""Causal attention over packed sequences, with the signature of torch's ``varlen_attn``: queries [Tq, heads, D],
keys and values [Tk, kv_heads, D], segment i's queries ``cu_seq_q[i]:cu_seq_q[i + 1]`` attending to its keys
``cu_seq_k[i]:cu_seq_k[i + 1]`` and to no other segment's (``enable_gqa``: kv_heads divides heads).

The causal mask is aligned bottom-right, as flash attention aligns it (``window_size=(-1, 0)``): where a segment has
more keys than queries, the first keys are a context every query sees (a shared prefix placed before the text), and
query j sees the context and its own keys up to j.

Two implementations answer the one signature (the packed decoder's path picks one, :func:`flash_available`):

- :func:`flash_varlen_attention`: torch's ``varlen_attn`` (flash attention on CUDA, fp16 or bf16);
- :func:`segment_attention`: the reference, on any device and dtype. Segments whose query lengths round up to the
  same width and that have the same number of context keys run as one padded ``scaled_dot_product_attention`` call,
  each segment computed alone. On CPU it is the fast path too (torch's fp32 flash attention for CPU), and the GPU
  path's packing, offsets, contexts and GQA run through it in the CPU tests.

A segment's padded width depends on its own length only, and either kernel computes each segment alone: a segment's
attention does not depend by a bit on the segments beside it (flash attention's split-KV is turned off where torch
allows it, ``num_splits=1``, since its choice depends on the longest segment of the call).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from mia_fast.pipeline.device import cpu_flash_attention, on_flash_device, to_device

CAUSAL = (-1, 0)
# Queries are padded to their length rounded up to this for the reference's padded calls.
ATTENTION_WIDTH_STEP = 16
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_HEAD_DIMS = range(8, 257, 8)


@lru_cache(maxsize=1)
def _varlen_parameters() -> frozenset[str] | None:
    """The keyword parameters of the installed torch's ``varlen_attn``; None where it has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return frozenset(inspect.signature(varlen_attn).parameters)


def flash_available(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether torch's flash ``varlen_attn`` runs attention of this device, dtype and head size."""
    return (
        on_flash_device(device)
        and dtype in FLASH_DTYPES
        and head_dim in FLASH_HEAD_DIMS
        and _varlen_parameters() is not None
    )


def flash_varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """torch's ``varlen_attn``, called as the installed torch takes it: causal as ``window_size=(-1, 0)`` (torch
    >= 2.11) or ``is_causal``; GQA through ``enable_gqa`` where it has it, else with keys and values repeated to every
    query head; split-KV off where it can be turned off."""
    from torch.nn.attention.varlen import varlen_attn

    parameters = _varlen_parameters()
    options: dict = {}
    if "window_size" in parameters:
        options["window_size"] = CAUSAL
    else:
        options["is_causal"] = True
    group = query.shape[1] // key.shape[1]
    if group > 1 and not (enable_gqa and "enable_gqa" in parameters):
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    elif group > 1:
        options["enable_gqa"] = True
    if "num_splits" in parameters:
        options["num_splits"] = 1
    return varlen_attn(
        query.contiguous(),
        key.contiguous(),
        value.contiguous(),
        cu_seq_q.to(torch.int32),
        cu_seq_k.to(torch.int32),
        max_q,
        max_k,
        **options,
    )


@dataclass(frozen=True)
class _SegmentGroup:
    """Segments with the same padded query ``width`` and the same number of ``context`` keys: one padded call.
    ``query_slots`` / ``key_slots`` pick each padded slot's packed query / key (padding repeats a real one, which the
    causal mask never lets a real query see), ``scored`` each real query's padded slot and ``tokens`` its packed
    position; ``mask`` lets a slot see the context and its own keys up to itself (None: plain causal)."""

    rows: int
    width: int
    context: int
    query_slots: torch.Tensor
    key_slots: torch.Tensor
    scored: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor | None


@lru_cache(maxsize=4)
def _segment_plan(
    q_offsets: tuple[int, ...], k_offsets: tuple[int, ...], device: torch.device
) -> tuple[_SegmentGroup, ...]:
    """The padded calls of a packing: made once per packing and reused by every layer. The offsets are read on the
    host (the decoder passes them there to this reference), so no layer waits for the device."""
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i in range(len(q_offsets) - 1):
        length = q_offsets[i + 1] - q_offsets[i]
        context = k_offsets[i + 1] - k_offsets[i] - length
        if context < 0:
            raise ValueError(f"segment {i} has fewer keys ({context + length}) than queries ({length})")
        if length:
            width = -(-length // ATTENTION_WIDTH_STEP) * ATTENTION_WIDTH_STEP
            by_shape.setdefault((width, context), []).append(i)
    groups = []
    for (width, context), members in by_shape.items():
        query_slots = torch.empty((len(members), width), dtype=torch.long)
        key_slots = torch.empty((len(members), context + width), dtype=torch.long)
        scored, tokens = [], []
        for row, i in enumerate(members):
            length = q_offsets[i + 1] - q_offsets[i]
            query_slots[row] = q_offsets[i] + torch.arange(width).clamp_(max=length - 1)
            key_slots[row] = k_offsets[i] + torch.arange(context + width).clamp_(max=context + length - 1)
            scored.append(row * width + torch.arange(length))
            tokens.append(q_offsets[i] + torch.arange(length))
        mask = None
        if context:
            mask = torch.ones(width, context + width, dtype=torch.bool)
            mask[:, context:] = torch.ones(width, width, dtype=torch.bool).tril()
            mask = to_device(mask, device)
        groups.append(
            _SegmentGroup(
                len(members),
                width,
                context,
                to_device(query_slots.reshape(-1), device),
                to_device(key_slots.reshape(-1), device),
                to_device(torch.cat(scored), device),
                to_device(torch.cat(tokens), device),
                mask,
            )
        )
    return tuple(groups)


def segment_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """The reference of the varlen signature: each segment alone, segments of one padded shape in one
    ``scaled_dot_product_attention`` call."""
    plan = _segment_plan(tuple(cu_seq_q.tolist()), tuple(cu_seq_k.tolist()), query.device)
    heads, head_dim = query.shape[1], query.shape[2]
    out = query.new_empty(query.shape)
    for group in plan:
        padded_q = query.index_select(0, group.query_slots).view(group.rows, group.width, heads, head_dim)
        padded_k, padded_v = (
            t.index_select(0, group.key_slots).view(group.rows, group.context + group.width, -1, head_dim)
            for t in (key, value)
        )
        attended = F.scaled_dot_product_attention(
            padded_q.transpose(1, 2),
            padded_k.transpose(1, 2),
            padded_v.transpose(1, 2),
            attn_mask=group.mask,
            is_causal=group.mask is None,
            enable_gqa=enable_gqa and key.shape[1] != heads,
        )
        out[group.tokens] = attended.transpose(1, 2).reshape(-1, heads, head_dim).index_select(0, group.scored)
    return out


def attention_with_lse(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of query [B, H, L, D] to key and value [B, H, S, D] (no mask but ``bias`` [B, 1, 1, S], -inf where a
    key is hidden), fp32: the output [B, H, L, D] and each query's log-sum-exp [B, H, L] of its scores, to merge
    attentions split over key sets. On CPU torch's flash attention for CPU, else :func:`plain_attention_with_lse`."""
    if cpu_flash_attention(query.device):
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
