"""Sequence aggregation over ragged per-token values: bottom-k means and the DC-PDD capped mean.

Texts are stored flat with ``offsets`` [B + 1] (text r spans ``offsets[r]:offsets[r + 1]``), the
TokenStats layout, so no padding is read or written.

Bottom-k: for each text r and each column j the mean of its ``counts[r, j]`` lowest values. Instead
of a sort, one program per text bisects, for every column at once, the 32-bit order key of the
count-th smallest value (32 counting passes over the text), then sums the values strictly below it
and adds the tied remainder. The count is exact whatever the ties; the sum accumulates in fp64.

DC-PDD: one program per text averages, over the positions its first-occurrence mask marks,
min(exp(logp) * -log_frequencies[id], cap). The mask is computed once, with the TokenStats.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_POSITIONS = 1024
# A bottom-k program compares a tile of at most this many (k, position) pairs a step; half on AMD, whose 64-lane
# wavefronts hold each comparison's lane mask in a pair of scalar registers: 32 a thread (8192 over 4 wavefronts)
# spilled 9-18 SGPRs at 8 and 16 k's on gfx90a, gfx942 and gfx950 (benchmarks/kernels_aot.py).
BOTTOM_K_TILE = 8192


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
            values = tl.load(values_ptr + begin + start + positions, mask=live, other=0.0)
            # A dead position's key is 2^32, above every trial, so it counts below none without its mask ANDed to
            # each comparison (with it, ptxas spilled 36 bytes on sm_75 at 2 k's).
            keys = tl.where(live, _order_key(values), 4294967296)
            below += tl.sum((keys[None, :] < trial[:, None]).to(tl.int64), axis=1)
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
def _capped_first_mean_kernel(
    ids_ptr,
    logp_ptr,
    first_ptr,
    offsets_ptr,
    log_frequencies_ptr,
    means_ptr,
    cap,
    BLOCK_L: tl.constexpr,
):
    text = tl.program_id(0).to(tl.int64)
    begin = tl.load(offsets_ptr + text)
    length = tl.load(offsets_ptr + text + 1) - begin
    positions = tl.arange(0, BLOCK_L)
    total = tl.zeros((), tl.float64)
    firsts = tl.zeros((), tl.int64)
    for start in range(0, length, BLOCK_L):
        live = start + positions < length
        first = live & (tl.load(first_ptr + begin + start + positions, mask=live, other=0) != 0)
        ids = tl.load(ids_ptr + begin + start + positions, mask=first, other=0)
        logp = tl.load(logp_ptr + begin + start + positions, mask=first, other=0.0)
        log_f = tl.load(log_frequencies_ptr + ids, mask=first, other=0.0).to(tl.float64)
        alpha = tl.minimum(tl.exp(logp).to(tl.float64) * -log_f, cap)
        total += tl.sum(tl.where(first, alpha, 0.0), axis=0)
        firsts += tl.sum(first.to(tl.int64), axis=0)
    mean = total / tl.maximum(firsts, 1).to(tl.float64)
    tl.store(means_ptr + text, tl.where(firsts > 0, mean, float("nan")))


# The jitted kernels, for benchmarks/kernels_aot.py's compile check (named as the launchers name them).
BOTTOM_K_MEANS_KERNEL = _bottom_k_means_kernel
CAPPED_FIRST_MEAN_KERNEL = _capped_first_mean_kernel


def bottom_k_blocks(n_ks: int, *, amd: bool = False) -> tuple[int, int]:
    """(BLOCK_L, BLOCK_K) of the bottom-k kernel for ``n_ks`` columns: a [BLOCK_K, BLOCK_L] tile of BOTTOM_K_TILE
    at most, half that on an AMD GPU."""
    block_k = triton.next_power_of_2(n_ks)
    tile = BOTTOM_K_TILE // 2 if amd else BOTTOM_K_TILE
    return max(16, min(BLOCK_POSITIONS, tile // block_k)), block_k


def _check_offsets(offsets: torch.Tensor, n_values: int) -> torch.Tensor:
    if offsets.dim() != 1 or offsets.numel() < 1:
        raise ValueError("offsets must be a 1-D tensor [texts + 1]")
    offsets = offsets.to(torch.int64).contiguous()
    if int(offsets[0]) != 0 or int(offsets[-1]) != n_values or bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"offsets must rise from 0 to the number of values ({n_values})")
    return offsets


def bottom_k_means(values: torch.Tensor, offsets: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Mean of the ``counts[r, j]`` lowest values of each text r, for every column j: fp64 [B, K].

    values [N] (fp32, or fp16/bf16, upcast), offsets [B + 1], counts int [B, K] with each count in
    [1, n_r] for a text of n_r > 0 values; NaN for a text with no values.
    """
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D, got shape {tuple(values.shape)}")
    offsets = _check_offsets(offsets, values.numel())
    n_texts = offsets.numel() - 1
    if counts.dim() != 2 or counts.shape[0] != n_texts or counts.shape[1] < 1:
        raise ValueError(f"counts must be [texts, K] = [{n_texts}, K >= 1], got shape {tuple(counts.shape)}")
    counts = counts.to(device=values.device, dtype=torch.int64).contiguous()
    lengths = (offsets[1:] - offsets[:-1])[:, None]
    if bool(((counts < 1) | ((counts > lengths) & (lengths > 0))).any()):
        raise ValueError("every count must lie in [1, the text's number of values]")
    n_ks = counts.shape[1]
    means = torch.empty((n_texts, n_ks), dtype=torch.float64, device=values.device)
    if n_texts:
        block_l, block_k = bottom_k_blocks(n_ks, amd=torch.version.hip is not None)
        _bottom_k_means_kernel[(n_texts,)](
            values.to(torch.float32).contiguous(),
            offsets,
            counts,
            means,
            n_ks,
            BLOCK_L=block_l,
            BLOCK_K=block_k,
        )
    return means


def capped_first_occurrence_mean(
    target_ids: torch.Tensor,
    logp: torch.Tensor,
    first_occurrence: torch.Tensor,
    offsets: torch.Tensor,
    log_frequencies: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """DC-PDD score [B] fp64: per text, the mean over the positions marked in ``first_occurrence``
    of min(exp(logp) * -log_frequencies[id], cap); NaN for a text with no marked position."""
    if not (target_ids.dim() == 1 and target_ids.shape == logp.shape == first_occurrence.shape):
        raise ValueError(
            "target_ids, logp and first_occurrence must be 1-D of one length, got "
            f"{tuple(target_ids.shape)}, {tuple(logp.shape)} and {tuple(first_occurrence.shape)}"
        )
    offsets = _check_offsets(offsets, target_ids.numel())
    vocab_size = log_frequencies.numel()
    ids = target_ids.to(torch.int64).contiguous()
    if ids.numel() and bool(((ids < 0) | (ids >= vocab_size)).any()):
        raise ValueError(f"target ids must lie in [0, {vocab_size}), the length of log_frequencies")
    n_texts = offsets.numel() - 1
    means = torch.empty(n_texts, dtype=torch.float64, device=ids.device)
    if n_texts:
        _capped_first_mean_kernel[(n_texts,)](
            ids,
            logp.to(torch.float32).contiguous(),
            first_occurrence.to(torch.int8).contiguous(),
            offsets,
            log_frequencies.contiguous(),
            means,
            float(cap),
            BLOCK_L=BLOCK_POSITIONS,
        )
    return means
