"""Per-row token statistics in one read of the logits.

For a row of logits z over the vocabulary and its target id x:
    logp = z_x - lse,   mu = sum_v p_v log p_v = E_p[z] - lse,   var = Var_p[log p] = Var_p[z],
    max_logp = max_v log p_v = max_v z_v - lse.

The kernel streams over the vocabulary once. Instead of raw power sums (sum e^(z-m) (z-m)^k, whose
var = S2/S0 - (S1/S0)^2 cancels catastrophically on peaked rows) it keeps, under the weights
w = e^(z - m), the total weight W, the weighted mean of z - m and the weighted sum of squared
deviations M2, merging block results with Chan's parallel update. When the running max m moves, W
and M2 are rescaled by e^(m_old - m_new) and the centred mean is shifted. Keeping the mean centred
on m makes logp = (z_x - m) - log W and mu = E[z - m] - log W free of large-magnitude
cancellation; the running max is the row's max, so max_logp = -log W comes from the same read.
Everything accumulates in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCK_V = 4096


@triton.jit
def _token_stats_kernel(
    logits_ptr,
    row_stride,
    targets_ptr,
    logp_ptr,
    mu_ptr,
    var_ptr,
    max_logp_ptr,
    vocab_size,
    ignore_index,
    BLOCK_V: tl.constexpr,
    TINY: tl.constexpr = 1e-30,
):
    row = tl.program_id(0).to(tl.int64)
    row_ptr = logits_ptr + row * row_stride
    target = tl.load(targets_ptr + row)

    neg_inf = float("-inf")
    running_max = tl.full((), neg_inf, tl.float32)
    weight = tl.zeros((), tl.float32)  # W = sum e^(z - m)
    centred_mean = tl.zeros((), tl.float32)  # E_w[z - m]
    m2 = tl.zeros((), tl.float32)  # sum w (z - E_w[z])^2
    for start in range(0, vocab_size, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        z = tl.load(row_ptr + cols, mask=cols < vocab_size, other=neg_inf).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(z, axis=0))
        # Every branch stays NaN-free (exp(-inf) = 0 rather than -inf - -inf), so rows with -inf
        # logits need no special path.
        finite_max = tl.where(new_max > neg_inf, new_max, 0.0)
        live = z > neg_inf
        shifted = tl.where(live, z - finite_max, 0.0)
        w = tl.exp(tl.where(live, shifted, neg_inf))
        block_weight = tl.sum(w, axis=0)
        block_mean = tl.sum(w * shifted, axis=0) / tl.maximum(block_weight, TINY)
        deviation = tl.where(live, shifted - block_mean, 0.0)
        block_m2 = tl.sum(w * deviation * deviation, axis=0)

        seen = running_max > neg_inf
        shift = tl.where(seen, running_max - finite_max, 0.0)
        scale = tl.exp(tl.where(seen, shift, neg_inf))
        old_weight = weight * scale
        old_mean = centred_mean + shift
        total = old_weight + block_weight
        share = block_weight / tl.maximum(total, TINY)
        keep = old_weight / tl.maximum(total, TINY)
        delta = block_mean - old_mean
        # A convex combination: exact when either side's weight underflows to zero.
        centred_mean = old_mean * keep + block_mean * share
        m2 = m2 * scale + block_m2 + delta * delta * old_weight * share
        weight = total
        running_max = new_max

    log_weight = tl.log(weight)
    valid = target != ignore_index
    safe_target = tl.where(valid, target, 0).to(tl.int64)
    target_logit = tl.load(row_ptr + safe_target).to(tl.float32)
    tl.store(logp_ptr + row, tl.where(valid, (target_logit - running_max) - log_weight, 0.0))
    tl.store(mu_ptr + row, tl.where(valid, centred_mean - log_weight, 0.0))
    tl.store(var_ptr + row, tl.where(valid, m2 / tl.maximum(weight, TINY), 0.0))
    tl.store(max_logp_ptr + row, tl.where(valid, -log_weight, 0.0))


def token_stats_launch(vocab_size: int) -> tuple[int, int]:
    """(BLOCK_V, num_warps) of the token_stats kernel for a vocabulary."""
    block = min(MAX_BLOCK_V, triton.next_power_of_2(vocab_size))
    return block, 8 if block >= 2048 else 4


def _check_targets(targets: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    bad = ((targets < 0) | (targets >= vocab_size)) & (targets != ignore_index)
    if bool(bad.any()):
        raise ValueError(f"target ids must lie in [0, {vocab_size}) or equal ignore_index={ignore_index}")


def token_stats(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp, mu, var, max_logp) in fp32 for logits [..., V] (bf16, fp16 or fp32) and targets [...].

    Rows whose target is ``ignore_index`` get 0 for all four (finite sentinels to be skipped).
    """
    if logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"logits must be fp32, bf16 or fp16, got {logits.dtype}")
    vocab_size = logits.shape[-1]
    leading = logits.shape[:-1]
    if targets.shape != leading:
        raise ValueError(f"targets shape {tuple(targets.shape)} does not match logits {tuple(logits.shape)}")
    rows = logits.reshape(-1, vocab_size)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    flat_targets = targets.reshape(-1).to(torch.int64).contiguous()
    _check_targets(flat_targets, vocab_size, ignore_index)
    n = rows.shape[0]
    logp, mu, var, max_logp = (torch.empty(n, dtype=torch.float32, device=logits.device) for _ in range(4))
    if n:
        block, warps = token_stats_launch(vocab_size)
        _token_stats_kernel[(n,)](
            rows,
            rows.stride(0),
            flat_targets,
            logp,
            mu,
            var,
            max_logp,
            vocab_size,
            ignore_index,
            BLOCK_V=block,
            num_warps=warps,
        )
    return logp.view(leading), mu.view(leading), var.view(leading), max_logp.view(leading)
