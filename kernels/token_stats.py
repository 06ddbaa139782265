"""Per-row token statistics in one read of the logits.

For a row of logits z over the vocabulary and its target id x:
    logp = z_x - lse,   mu = sum_v p_v log p_v = E_p[z] - lse,   var = Var_p[log p] = Var_p[z],
    max_logp = max_v log p_v = max_v z_v - lse.

The kernel streams over the vocabulary once, BLOCK_V logits of a row at a time, and keeps its state per
lane: lane j sees the logits j, j + BLOCK_V, j + 2 BLOCK_V, ... of the row. A lane holds its running max
m and, under the weights w = e^(z - m), the total weight W, the depth D = E_w[m - z] >= 0 (how far below
the max its mass lies: a mean centred on the max, free of large-magnitude cancellation) and M2, the
weighted sum of squared deviations (not raw power sums sum e^(z-m) (z-m)^k, whose
var = S2/S0 - (S1/S0)^2 cancels catastrophically on peaked rows). The loop body is elementwise, with no
cross-lane reduction, so the loads stream.

Each logit merges into its lane by Chan's update of two weighted sets, the lane's (rescaled by
e^(m - m_new)) and the logit alone (weight e^(z - m_new)). One of the two factors is 1, so one exp per
logit, e^(-|z - m|), gives both. With d = z - (m - D) the logit's distance from the lane's mean:
    below the max:  W' = W + w,        D' = D - d w / W',          M2' = M2 + d^2 W w / W'
    a new max:      W' = W e^(m-z) + 1, D' = d W e^(m-z) / W',     M2' = M2 e^(m-z) + d^2 W e^(m-z) / W'
The first is Welford's form (a rounding error in 1/W' touches only the increment), the second a convex
combination, exact when the old weight underflows. The exp is exp2 and 1/W' is rsqrt(W')^2 (W' >= 1, as
a lane's max weighs 1): single hardware approximations without range fix-ups. Logits of -inf or NaN (and
masked tail lanes) are raised to LOGIT_FLOOR, where they weigh exactly 0 next to any real logit while
every difference and square stays finite, so no branch makes a NaN.

After the loop, the lanes of a row merge once by the same combine, done as reductions: the row max M,
each lane's W and M2 rescaled by e^(m - M) and its centred mean (m - M) - D, the total weight W, the
weighted mean and M2 = sum(M2_lane) + sum(W_lane (mean_lane - mean)^2). Then logp = (z_x - M) - log W,
mu = E[z - M] - log W, var = M2 / W and max_logp = -log W. Everything accumulates in fp32.

A program handles ROWS rows as a [ROWS, BLOCK_V] block (several rows when the vocabulary is small). The
launch settings come from ``triton.autotune``, keyed on the vocabulary size, over the configs of
TOKEN_STATS_CONFIGS that fit it (``fitting_configs``); the interpreter cannot benchmark, so under it the
kernel runs at ``default_config(vocab_size)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# ROWS * BLOCK_V / (32 * num_warps) = the logits (and lane states) per thread, at most 16. With one row per
# program: BLOCK_V 4096 / 8 warps, 2048 / 8 and 1024 / 4 were the fixed launch (for V > 2048, V > 1024 and
# V > 512), 2048 / 4 the best measured; several rows per program serve small vocabularies.
TOKEN_STATS_CONFIGS = (
    triton.Config({"ROWS": 1, "BLOCK_V": 4096}, num_warps=8),
    triton.Config({"ROWS": 1, "BLOCK_V": 2048}, num_warps=8),
    triton.Config({"ROWS": 1, "BLOCK_V": 2048}, num_warps=4),
    triton.Config({"ROWS": 1, "BLOCK_V": 1024}, num_warps=4),
    triton.Config({"ROWS": 2, "BLOCK_V": 1024}, num_warps=4),
    triton.Config({"ROWS": 4, "BLOCK_V": 512}, num_warps=4),
    triton.Config({"ROWS": 8, "BLOCK_V": 256}, num_warps=4),
)

# Logits at or below it (-inf included) weigh 0; differences and squares of it stay finite in fp32.
LOGIT_FLOOR = tl.constexpr(-1e18)
LOG2E = tl.constexpr(1.4426950408889634)
# A lane adds its logits one after another in fp32: at 594 logits a lane (V = 151936, BLOCK_V = 256) logp's
# error against fp64 grew 3.5-fold in the interpreter; at 149 (BLOCK_V = 1024) it did not grow.
MAX_LANE_LOGITS = 128


def fitting_configs(vocab_size: int) -> list[triton.Config]:
    """The configs, in TOKEN_STATS_CONFIGS order, whose block is no wider than the vocabulary rounded up to a
    power of two and whose lanes see at most MAX_LANE_LOGITS logits each (where no block is that narrow or
    that wide, the blocks nearest to it)."""
    blocks = [config.kwargs["BLOCK_V"] for config in TOKEN_STATS_CONFIGS]
    narrowest = min(max(blocks), triton.cdiv(vocab_size, MAX_LANE_LOGITS))
    widest = max(min(blocks), triton.next_power_of_2(vocab_size))
    return [config for config in TOKEN_STATS_CONFIGS if narrowest <= config.kwargs["BLOCK_V"] <= widest]


def default_config(vocab_size: int) -> triton.Config:
    """The config used where autotuning cannot benchmark: for V > 512, the pre-autotune launch
    (BLOCK_V = min(4096, next_pow2(V)), 8 warps from 2048 up, one row per program)."""
    return fitting_configs(vocab_size)[0]


def _prune_to_vocabulary(configs, named_args, **kwargs):
    return fitting_configs(named_args["vocab_size"])


@triton.jit
def _token_stats_kernel(
    logits_ptr,
    row_stride,
    targets_ptr,
    logp_ptr,
    mu_ptr,
    var_ptr,
    max_logp_ptr,
    n_rows,
    vocab_size,
    ignore_index,
    ROWS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_live = rows < n_rows
    row_ptrs = logits_ptr + rows[:, None] * row_stride
    targets = tl.load(targets_ptr + rows, mask=row_live, other=ignore_index)

    lane_max = tl.full((ROWS, BLOCK_V), LOGIT_FLOOR, tl.float32)
    lane_weight = tl.zeros((ROWS, BLOCK_V), tl.float32)  # W = sum e^(z - m)
    lane_depth = tl.zeros((ROWS, BLOCK_V), tl.float32)  # E_w[m - z] >= 0
    lane_m2 = tl.zeros((ROWS, BLOCK_V), tl.float32)  # sum w (z - E_w[z])^2
    for start in range(0, vocab_size, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        mask = row_live[:, None] & (cols < vocab_size)[None, :]
        z = tl.load(row_ptrs + cols[None, :], mask=mask, other=float("-inf")).to(tl.float32)
        z = tl.maximum(z, LOGIT_FLOOR)  # NaN-dropping, so a NaN logit weighs 0 as before
        gap = z - lane_max
        higher = gap > 0
        decay = tl.exp2(tl.abs(gap) * -LOG2E)  # e^(-|z - m|)
        old_scale = tl.where(higher, decay, 1.0)  # e^(m - m_new)
        new_weight = tl.where(higher, 1.0, decay)  # e^(z - m_new)
        old_weight = lane_weight * old_scale
        total = old_weight + new_weight
        root = tl.math.rsqrt(total)
        inverse_total = root * root
        share = new_weight * inverse_total
        keep = old_weight * inverse_total
        distance = gap + lane_depth  # z minus the lane's old weighted mean
        kept_distance = distance * keep
        lane_depth = tl.where(higher, kept_distance, lane_depth - distance * share)
        lane_m2 = lane_m2 * old_scale + distance * kept_distance * new_weight
        lane_weight = total
        lane_max = tl.maximum(lane_max, z)

    row_max = tl.max(lane_max, axis=1)
    lane_shift = lane_max - row_max[:, None]
    lane_scale = tl.exp(lane_shift)
    scaled_weight = lane_weight * lane_scale
    shifted_mean = lane_shift - lane_depth
    weight = tl.sum(scaled_weight, axis=1)
    centred_mean = tl.sum(scaled_weight * shifted_mean, axis=1) / weight
    spread = shifted_mean - centred_mean[:, None]
    m2 = tl.sum(lane_m2 * lane_scale + scaled_weight * spread * spread, axis=1)

    log_weight = tl.log(weight)
    valid = targets != ignore_index
    safe_targets = tl.where(valid, targets, 0).to(tl.int64)
    target_logits = tl.load(logits_ptr + rows * row_stride + safe_targets, mask=row_live, other=0.0).to(tl.float32)
    tl.store(logp_ptr + rows, tl.where(valid, (target_logits - row_max) - log_weight, 0.0), mask=row_live)
    tl.store(mu_ptr + rows, tl.where(valid, centred_mean - log_weight, 0.0), mask=row_live)
    tl.store(var_ptr + rows, tl.where(valid, m2 / weight, 0.0), mask=row_live)
    tl.store(max_logp_ptr + rows, tl.where(valid, -log_weight, 0.0), mask=row_live)


_token_stats_autotuned = triton.autotune(
    configs=list(TOKEN_STATS_CONFIGS), key=["vocab_size"], prune_configs_by={"early_config_prune": _prune_to_vocabulary}
)(_token_stats_kernel)
# Under TRITON_INTERPRET=1 triton.jit makes an interpreted function, which the autotuner cannot time.
_CAN_AUTOTUNE = isinstance(_token_stats_kernel, triton.runtime.JITFunction)


def _check_targets(targets: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    bad = ((targets < 0) | (targets >= vocab_size)) & (targets != ignore_index)
    message = f"target ids must lie in [0, {vocab_size}) or equal ignore_index={ignore_index}"
    if targets.is_cuda:  # checked on the device, so the host never waits for it inside a pass
        torch._assert_async(~bad.any(), message)
    elif bool(bad.any()):
        raise ValueError(message)


def _token_stats(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, config: triton.Config | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
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
        arguments = (rows, rows.stride(0), flat_targets, logp, mu, var, max_logp, n, vocab_size, ignore_index)
        if config is None and _CAN_AUTOTUNE:
            _token_stats_autotuned[lambda meta: (triton.cdiv(n, meta["ROWS"]),)](*arguments)
        else:
            config = config or default_config(vocab_size)
            grid = (triton.cdiv(n, config.kwargs["ROWS"]),)
            _token_stats_kernel[grid](
                *arguments, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages
            )
    return logp.view(leading), mu.view(leading), var.view(leading), max_logp.view(leading)


def token_stats(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp, mu, var, max_logp) in fp32 for logits [..., V] (bf16, fp16 or fp32) and targets [...].

    Rows whose target is ``ignore_index`` get 0 for all four (finite sentinels to be skipped).
    """
    return _token_stats(logits, targets, ignore_index, None)


def token_stats_with_config(
    logits: torch.Tensor, targets: torch.Tensor, config: triton.Config, ignore_index: int = -100
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """token_stats at one launch config (one of TOKEN_STATS_CONFIGS), bypassing the autotuner."""
    return _token_stats(logits, targets, ignore_index, config)
