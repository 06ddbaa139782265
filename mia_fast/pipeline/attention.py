"""Causal attention over packed sequences, torch's ``varlen_attn`` with its offsets as one :class:`Segments`: queries
[Tq, heads, D], keys and values [Tk, kv_heads, D], segment i's queries ``cu_seq_q[i]:cu_seq_q[i + 1]`` attending to its
keys ``cu_seq_k[i]:cu_seq_k[i + 1]`` and to no other segment's (``enable_gqa``: kv_heads divides heads, query head h
reading key head h // (heads / kv_heads)).

The causal mask is aligned bottom-right, as flash attention aligns it (``window_size=(-1, 0)``): where a segment has
more keys than queries, the first keys are a context every query sees (a shared prefix placed before the text), and
query j sees the context and its own keys up to j. Query j of a segment of Lq queries and Lk keys stands at key
position p = Lk - Lq + j. A sliding ``window`` W (Mistral's and Qwen2's ``sliding_window``) lets it see the keys at
p - W < position <= p only, as transformers' ``sliding_window_causal_mask_function`` does (``kv_idx > q_idx -
sliding_window`` and causal): itself and the W - 1 keys before it, context included; flash attention's
``window_size=(W - 1, 0)``. None: plain causal.

Two implementations answer the one signature (the packed decoder's path picks one, :func:`flash_available`):

- :func:`flash_varlen_attention`: torch's varlen flash attention (CUDA, fp16 or bf16). Grouped keys and values pass
  with their own heads, never repeated: through ``varlen_attn(enable_gqa=True)`` where it takes it (torch 2.13's
  does), else straight to the op ``varlen_attn`` runs underneath, aten's ``_flash_attention_forward``, which takes
  fewer key heads as flash attention does (torch 2.10's and 2.11's ``varlen_attn`` have no ``enable_gqa``);
- :func:`segment_attention`: the reference, on any device and dtype. Segments whose query lengths round up to the
  same width and that have the same number of context keys run as one padded ``scaled_dot_product_attention`` call,
  each segment computed alone; plain causal (``is_causal``) where no context nor window hides a key of the group,
  else a boolean mask. On CPU it is the fast path too (torch's fp32 flash attention for CPU, which takes grouped
  heads), and the GPU path's packing, offsets, contexts, windows and GQA run through it in the CPU tests. Elsewhere
  grouped keys and values are repeated to every query head first: a GPU's memory-efficient kernel (the one that takes
  fp32 and masks) has no grouped heads, and torch would answer them with its math backend, which holds every score.

A segment's padded width depends on its own length only, and either kernel computes each segment alone: a segment's
attention does not depend by a bit on the segments beside it (flash attention's split-KV is turned off where torch
allows it, ``num_splits=1``, since its choice depends on the longest segment of the call).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from mia_fast.pipeline.device import cpu_flash_attention, flash_refusal, to_device, torch_internal

CAUSAL = (-1, 0)
# Queries are padded to their length rounded up to this for the reference's padded calls.
ATTENTION_WIDTH_STEP = 16
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_HEAD_DIMS = range(8, 257, 8)
Attention = Callable[..., torch.Tensor]


@lru_cache(maxsize=1)
def _varlen_parameters() -> frozenset[str] | None:
    """The keyword parameters of the installed torch's ``varlen_attn``; None where it has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: PLC0415 (torch before 2.10 has none; looked up when called, as tests stand in for it)
    except ImportError:
        return None
    return frozenset(inspect.signature(varlen_attn).parameters)


def why_not_flash(device: torch.device, dtype: torch.dtype, head_dim: int) -> str | None:
    """Why torch's flash ``varlen_attn`` does not run attention of this device, dtype and head size; None where it
    does."""
    refusal = flash_refusal(device)
    if refusal is not None:
        return refusal
    if dtype not in FLASH_DTYPES:
        return f"flash attention takes fp16 or bf16, not {str(dtype).removeprefix('torch.')}"
    if head_dim not in FLASH_HEAD_DIMS:
        return f"flash attention takes heads of 8 to 256 dims in steps of 8, not {head_dim}"
    if _varlen_parameters() is None:
        return f"torch {torch.__version__} has no varlen_attn"
    return None


def flash_available(device: torch.device, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether torch's flash ``varlen_attn`` runs attention of this device, dtype and head size."""
    return why_not_flash(device, dtype, head_dim) is None


@dataclass(frozen=True)
class Segments:
    """Where packed segments sit: segment i's queries are ``cu_seq_q[i]:cu_seq_q[i + 1]``, its keys
    ``cu_seq_k[i]:cu_seq_k[i + 1]`` (int64 on the host for the reference, int32 on the device for flash attention);
    ``max_q`` and ``max_k`` the most queries and keys of a segment."""

    cu_seq_q: torch.Tensor
    cu_seq_k: torch.Tensor
    max_q: int
    max_k: int


def _check_call(query: torch.Tensor, key: torch.Tensor, *, enable_gqa: bool, window: int | None) -> None:
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads != heads and not (enable_gqa and heads % kv_heads == 0):
        raise ValueError(f"{heads} query heads and {kv_heads} key heads: grouped heads need enable_gqa and a divisor")
    if window is not None and window < 1:
        raise ValueError(f"a sliding window holds at least the query's own key, got window={window}")


def _flash_window(window: int | None) -> tuple[int, int]:
    """Flash attention's ``(left, right)`` window for a sliding ``window`` (None: causal): a query sees itself and
    the ``window - 1`` keys before it."""
    return CAUSAL if window is None else (window - 1, 0)


def flash_varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: Segments,
    *,
    enable_gqa: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    """torch's varlen flash attention, called as the installed torch takes it: ``varlen_attn`` with grouped heads
    (``enable_gqa``) and split-KV off where it takes them, else the op it runs, aten's ``_flash_attention_forward``
    (which takes grouped heads as they are)."""
    _check_call(query, key, enable_gqa=enable_gqa, window=window)
    left, right = _flash_window(window)
    query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    cu_seq_q, cu_seq_k = segments.cu_seq_q.to(torch.int32), segments.cu_seq_k.to(torch.int32)
    max_q, max_k = segments.max_q, segments.max_k
    parameters = _varlen_parameters()
    if "enable_gqa" not in parameters:
        return torch_internal(torch.ops.aten, "_flash_attention_forward")(
            query,
            key,
            value,
            cu_seq_q,
            cu_seq_k,
            max_q,
            max_k,
            dropout_p=0.0,
            is_causal=window is None,
            return_debug_mask=False,
            window_size_left=left,
            window_size_right=right,
        )[0]
    from torch.nn.attention.varlen import varlen_attn  # noqa: PLC0415 (torch before 2.10 has none; looked up when called, as tests stand in for it)

    options = {"num_splits": 1} if "num_splits" in parameters else {}
    return varlen_attn(
        query,
        key,
        value,
        cu_seq_q,
        cu_seq_k,
        max_q,
        max_k,
        window_size=(left, right),
        enable_gqa=enable_gqa,
        **options,
    )


@dataclass(frozen=True)
class _SegmentGroup:
    """Segments with the same padded query ``width`` and the same number of ``context`` keys: one padded call.
    ``query_slots`` / ``key_slots`` pick each padded slot's packed query / key (padding repeats a real one, which the
    causal mask never lets a real query see), ``scored`` each real query's padded slot and ``tokens`` its packed
    position; ``mask`` the keys each slot sees (None: plain causal)."""

    rows: int
    width: int
    context: int
    query_slots: torch.Tensor
    key_slots: torch.Tensor
    scored: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor | None


def _visible_keys(width: int, context: int, window: int | None) -> torch.Tensor | None:
    """Which of a group's ``context + width`` keys each of its ``width`` query slots sees (slot j stands at key
    position context + j); None where that is plain causal, for torch's fast causal kernels: no context, and no window
    or one that covers the whole group."""
    if not context and (window is None or width <= window):
        return None
    query_at = context + torch.arange(width)[:, None]
    key_at = torch.arange(context + width)[None, :]
    visible = key_at <= query_at
    if window is not None:
        visible &= key_at > query_at - window
    return visible


@lru_cache(maxsize=4)
def _segment_plan(
    q_offsets: tuple[int, ...], k_offsets: tuple[int, ...], window: int | None, device: torch.device
) -> tuple[_SegmentGroup, ...]:
    """The padded calls of a packing (and window): made once per packing and reused by every layer. The offsets are
    read on the host (the decoder passes them there to this reference), so no layer waits for the device."""
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
        mask = _visible_keys(width, context, window)
        groups.append(
            _SegmentGroup(
                len(members),
                width,
                context,
                to_device(query_slots.reshape(-1), device),
                to_device(key_slots.reshape(-1), device),
                to_device(torch.cat(scored), device),
                to_device(torch.cat(tokens), device),
                None if mask is None else to_device(mask, device),
            )
        )
    return tuple(groups)


def _heads_for_sdpa(key: torch.Tensor, value: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values [T, kv_heads, D] as ``scaled_dot_product_attention``'s fast kernels take them here: grouped
    where torch's CPU flash attention runs (it takes grouped heads), else repeated to every query head, since a GPU's
    memory-efficient kernel has none and torch would fall to its math backend (fp32 scores of every query and key)."""
    if key.shape[1] == heads or cpu_flash_attention(key.device):
        return key, value
    group = heads // key.shape[1]
    return key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)


def segment_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: Segments,
    *,
    enable_gqa: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    """The reference of the varlen signature: each segment alone, segments of one padded shape in one
    ``scaled_dot_product_attention`` call."""
    _check_call(query, key, enable_gqa=enable_gqa, window=window)
    plan = _segment_plan(tuple(segments.cu_seq_q.tolist()), tuple(segments.cu_seq_k.tolist()), window, query.device)
    heads, head_dim = query.shape[1], query.shape[2]
    key, value = _heads_for_sdpa(key, value, heads)
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
            enable_gqa=key.shape[1] != heads,
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
        flash_for_cpu = torch_internal(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
        return flash_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, attn_mask=bias)
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


@dataclass(frozen=True)
class AttentionBackend:
    """An attention of the varlen signature as the packed decoder runs it: its ``name`` (as ``--verbose`` prints it),
    the function, whether it reads the segment offsets on the host (the reference plans its padded calls there) or
    on the device (int32, as flash attention takes them), and whether q, k and v stay in the model's dtype (else
    fp32)."""

    name: str
    attend: Attention
    offsets_on_host: bool
    in_model_dtype: bool


FLASH_ATTENTION = AttentionBackend(
    "varlen attention (flash)", flash_varlen_attention, offsets_on_host=False, in_model_dtype=True
)
SEGMENT_ATTENTION = AttentionBackend(
    "segment-wise attention", segment_attention, offsets_on_host=True, in_model_dtype=False
)


def attention_backend(device: torch.device, dtype: torch.dtype, head_dim: int) -> AttentionBackend:
    """Flash attention where it runs this device, dtype and head size (:func:`flash_available`), else the
    reference."""
    return FLASH_ATTENTION if flash_available(device, dtype, head_dim) else SEGMENT_ATTENTION
