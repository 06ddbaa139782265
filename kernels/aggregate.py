"""Sequence aggregation over ragged per-token values: bottom-k means and the DC-PDD capped mean.

Texts are stored flat with ``offsets`` [B + 1] (text r spans ``offsets[r]:offsets[r + 1]``), the
TokenStats layout, so no padding is read or written.

Bottom-k: for each text and each k the mean of its ``max(1, floor(k * n))`` lowest values. Instead of
a sort, one program per text bisects, for every k at once, the 32-bit order key of the count-th
smallest value (32 counting passes over the text), then sums the values strictly below it and adds
the tied remainder. The count is exact whatever the ties; the sum accumulates in fp64.

DC-PDD: the first occurrence of each id within its text comes from an atomic min of positions into
a [texts, V] scratch table (one kernel), read back by a second kernel that gathers the
log-frequencies, caps alpha = p * (-ln f) at ``cap`` and averages over first occurrences. The launch
boundary between the two orders every write before any read.
"""

from __future__ import annotations

from typing import Sequence

import torch
import triton
import triton.language as tl

BLOCK_POSITIONS = 1024
# Bytes of the [texts, V] first-position scratch table: texts are processed in groups under this.
SCRATCH_BYTES = 64 << 20
_NO_POSITION = torch.iinfo(torch.int32).max


@triton.jit
def _order_key(values):
    """Maps fp32 values to int64 keys in [0, 2^32) that sort exactly as the floats do (NaN last)."""
    bits = values.to(tl.int32, bitcast=True)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648


@triton.jit
def _key_value(keys):
    """The inverse of :func:`_order_key`."""
    bits = (keys - 2147483648).to(tl.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _bottom_k_means_kernel(
    values_ptr,
    offsets_ptr,
    counts_ptr,
    means_ptr,
    n_ks,
    BLOCK_L: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    text = tl.program_id(0).to(tl.int64)
    begin = tl.load(offsets_ptr + text)
    length = tl.load(offsets_ptr + text + 1) - begin
    k_index = tl.arange(0, BLOCK_K)
    k_live = k_index < n_ks
    counts = tl.load(counts_ptr + text * n_ks + k_index, mask=k_live, other=1)
    positions = tl.arange(0, BLOCK_L)

    # threshold ends as the smallest key with count(key <= threshold) >= count, built bit by bit
    # while keeping count(key < threshold) < count.
    threshold = tl.zeros((BLOCK_K,), tl.int64)
    step = tl.full((), 2147483648, tl.int64)
    for _ in range(32):
        trial = threshold + step
        below = tl.zeros((BLOCK_K,), tl.int64)
        for start in range(0, length, BLOCK_L):
            live = start + positions < length
            keys = _order_key(tl.load(values_ptr + begin + start + positions, mask=live, other=0.0))
            hit = (keys[None, :] < trial[:, None]) & live[None, :]
            below += tl.sum(hit.to(tl.int64), axis=1)
        threshold = tl.where(below < counts, trial, threshold)
        step = step >> 1

    total = tl.zeros((BLOCK_K,), tl.float64)
    below = tl.zeros((BLOCK_K,), tl.int64)
    for start in range(0, length, BLOCK_L):
        live = start + positions < length
        values = tl.load(values_ptr + begin + start + positions, mask=live, other=0.0)
        hit = (_order_key(values)[None, :] < threshold[:, None]) & live[None, :]
        total += tl.sum(tl.where(hit, values.to(tl.float64)[None, :], 0.0), axis=1)
        below += tl.sum(hit.to(tl.int64), axis=1)
    total += (counts - below).to(tl.float64) * _key_value(threshold).to(tl.float64)
    means = tl.where(length > 0, total / counts.to(tl.float64), float("nan"))
    tl.store(means_ptr + text * n_ks + k_index, means, mask=k_live)


@triton.jit
def _first_position_kernel(
    ids_ptr,
    segments_ptr,
    offsets_ptr,
    first_position_ptr,
    group_begin,
    group_end,
    first_text,
    vocab_size,
    BLOCK_L: tl.constexpr,
):
    flat = group_begin + tl.program_id(0).to(tl.int64) * BLOCK_L + tl.arange(0, BLOCK_L)
    live = flat < group_end
    ids = tl.load(ids_ptr + flat, mask=live, other=0)
    text = tl.load(segments_ptr + flat, mask=live, other=first_text).to(tl.int64)
    position = (flat - tl.load(offsets_ptr + text, mask=live, other=0)).to(tl.int32)
    slot = (text - first_text) * vocab_size + ids
    tl.atomic_min(first_position_ptr + slot, position, mask=live)


@triton.jit
def _capped_first_mean_kernel(
    ids_ptr,
    logp_ptr,
    offsets_ptr,
    first_position_ptr,
    log_frequencies_ptr,
    first_mask_ptr,
    means_ptr,
    first_text,
    vocab_size,
    cap,
    BLOCK_L: tl.constexpr,
):
    text = first_text + tl.program_id(0).to(tl.int64)
    begin = tl.load(offsets_ptr + text)
    length = tl.load(offsets_ptr + text + 1) - begin
    table = first_position_ptr + (text - first_text) * vocab_size
    positions = tl.arange(0, BLOCK_L)
    total = tl.zeros((), tl.float64)
    firsts = tl.zeros((), tl.int64)
    for start in range(0, length, BLOCK_L):
        live = start + positions < length
        ids = tl.load(ids_ptr + begin + start + positions, mask=live, other=0)
        first = live & (tl.load(table + ids, mask=live, other=-1) == start + positions)
        logp = tl.load(logp_ptr + begin + start + positions, mask=first, other=0.0)
        log_f = tl.load(log_frequencies_ptr + ids, mask=first, other=0.0).to(tl.float64)
        alpha = tl.minimum(tl.exp(logp).to(tl.float64) * -log_f, cap)
        total += tl.sum(tl.where(first, alpha, 0.0), axis=0)
        firsts += tl.sum(first.to(tl.int64), axis=0)
        tl.store(first_mask_ptr + begin + start + positions, first.to(tl.int8), mask=live)
    mean = total / tl.maximum(firsts, 1).to(tl.float64)
    tl.store(means_ptr + text, tl.where(firsts > 0, mean, float("nan")))


def bottom_k_counts(lengths: torch.Tensor, ks: Sequence[float]) -> torch.Tensor:
    """max(1, floor(k * n)) per text and k, int64 [B, K]; floor(k * n) in float64 like ``int(n * k)``."""
    if not ks or not all(0.0 < k <= 1.0 for k in ks):
        raise ValueError(f"ks must be fractions in (0, 1], got {list(ks)}")
    fractions = torch.tensor(list(ks), dtype=torch.float64, device=lengths.device)
    return torch.floor(lengths.to(torch.float64)[:, None] * fractions[None, :]).to(torch.int64).clamp_(min=1)


def _check_offsets(offsets: torch.Tensor, n_values: int) -> torch.Tensor:
    if offsets.dim() != 1 or offsets.numel() < 1:
        raise ValueError("offsets must be a 1-D tensor [texts + 1]")
    offsets = offsets.to(torch.int64).contiguous()
    if int(offsets[0]) != 0 or int(offsets[-1]) != n_values or bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"offsets must rise from 0 to the number of values ({n_values})")
    return offsets


def bottom_k_means(values: torch.Tensor, offsets: torch.Tensor, ks: Sequence[float]) -> torch.Tensor:
    """Mean of each text's ``max(1, floor(k * n))`` lowest values for every k: fp64 [B, len(ks)].

    values [N] (fp32, or fp16/bf16, upcast), offsets [B + 1]; NaN for a text with no values.
    """
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D, got shape {tuple(values.shape)}")
    offsets = _check_offsets(offsets, values.numel())
    counts = bottom_k_counts(offsets[1:] - offsets[:-1], ks).contiguous()
    n_texts, n_ks = counts.shape
    means = torch.empty((n_texts, n_ks), dtype=torch.float64, device=values.device)
    if n_texts:
        block_k = triton.next_power_of_2(n_ks)
        _bottom_k_means_kernel[(n_texts,)](
            values.to(torch.float32).contiguous(), offsets, counts, means, n_ks,
            BLOCK_L=max(16, min(BLOCK_POSITIONS, 8192 // block_k)), BLOCK_K=block_k,
        )
    return means


def first_occurrence_capped_mean(
    target_ids: torch.Tensor,
    logp: torch.Tensor,
    offsets: torch.Tensor,
    log_frequencies: torch.Tensor,
    cap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(first-occurrence mask [N] bool, DC-PDD score [B] fp64).

    The score of a text is the mean, over the first occurrence of each distinct id in it, of
    min(exp(logp) * -log_frequencies[id], cap); NaN for a text with no values.
    """
    if target_ids.shape != logp.shape or target_ids.dim() != 1:
        raise ValueError(f"target_ids and logp must be 1-D of one length, got {tuple(target_ids.shape)} and {tuple(logp.shape)}")
    offsets = _check_offsets(offsets, target_ids.numel())
    vocab_size = log_frequencies.numel()
    ids = target_ids.to(torch.int64).contiguous()
    if ids.numel() and bool(((ids < 0) | (ids >= vocab_size)).any()):
        raise ValueError(f"target ids must lie in [0, {vocab_size}), the length of log_frequencies")
    device, n_texts = ids.device, offsets.numel() - 1
    first_mask = torch.zeros(ids.numel(), dtype=torch.int8, device=device)
    means = torch.empty(n_texts, dtype=torch.float64, device=device)
    group = max(1, min(n_texts, SCRATCH_BYTES // (4 * vocab_size)))
    first_position = torch.empty((group, vocab_size), dtype=torch.int32, device=device)
    segments = torch.repeat_interleave(torch.arange(n_texts, dtype=torch.int32, device=device), offsets[1:] - offsets[:-1])
    logp, log_frequencies = logp.to(torch.float32).contiguous(), log_frequencies.contiguous()
    for first_text in range(0, n_texts, group):
        last_text = min(first_text + group, n_texts)
        group_begin, group_end = int(offsets[first_text]), int(offsets[last_text])
        first_position.fill_(_NO_POSITION)
        if group_end > group_begin:
            _first_position_kernel[(triton.cdiv(group_end - group_begin, BLOCK_POSITIONS),)](
                ids, segments, offsets, first_position, group_begin, group_end, first_text, vocab_size,
                BLOCK_L=BLOCK_POSITIONS,
            )
        _capped_first_mean_kernel[(last_text - first_text,)](
            ids, logp, offsets, first_position, log_frequencies, first_mask, means, first_text, vocab_size, float(cap),
            BLOCK_L=BLOCK_POSITIONS,
        )
    return first_mask.bool(), means
