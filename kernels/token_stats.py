"""Per-row token statistics in one read of the logits.

For a row of logits z over the vocabulary and its target id x:
    logp = z_x - lse,   mu = sum_v p_v log p_v = E_p[z] - lse,   var = Var_p[log p] = Var_p[z],
    max_logp = max_v log p_v = max_v z_v - lse.

The kernel streams over the vocabulary once, BLOCK_V logits of a row a block. Each thread (a lane) takes CHUNK
logits of a block, as K = CHUNK / VEC slices of VEC contiguous logits (16-byte loads), LANES * VEC apart, and
keeps a running state: its max m and, in base-2 units y = z log2 e about the reference r = round(m log2 e),
the total weight W = sum 2^(y - r), the weighted mean of y - r and M2, the weighted sum of squared deviations
(not raw power sums, whose var = S2/S0 - (S1/S0)^2 cancels catastrophically on peaked rows).

Why this design (issue 57): the former kernel merged every logit into its lane by Chan's update, ~24 SASS
instructions a logit. Now a lane's chunk is reduced in registers first and merged once a block:
  - the chunk max (on NVIDIA a packed bf16/fp16 max, HMNMX2, two logits an instruction: exact), then
    d = y - r_chunk by one fma (z log2 e exact in it), w = 2^d (one MUFU), and two passes over the chunk's
    registers: sum w and sum w d (the mean), then sum w (d - mean)^2 (centred M2, no cancellation);
  - the sums run along the K slices elementwise (a chain of fmas: Triton sums a thread's values of one tensor as
    a tree, where a product fuses into only every other add), then over VEC;
  - bf16 converts to fp32 by one shift or mask a value: on NVIDIA by inline PTX (Triton's conversion spends two
    there), elsewhere by Triton's conversion;
  - one Chan merge of the chunk into the lane a block: W' = W 2^(r - r') + W_c 2^(r_c - r'), means shifted to
    r' and combined convexly, M2' = M2 2^(..) + M2_c 2^(..) + W W_c / W' gap^2; 1/W' is rsqrt(W')^2 (W' >= 1:
    a max weighs 1);
  - the main loop covers the full blocks without masks and pipelines its loads with tl.range(num_stages=3)
    (cp.async / LDGSTS on sm_80 and sm_90: two blocks in flight while one is reduced); one masked block ends a row.
At CHUNK = 64 (the configs for large vocabularies) that is 11.6-12.0 SASS instructions a logit (V = 151936,
bf16, fp16, fp32, sm_80 and sm_90; ``benchmarks/kernels_aot.py``), and 9.7-11.4 AMDGCN instructions on gfx942.

Why the vendor forms are the launcher's choice (issue 66): AMD's assembler rejects PTX, and a kernel cannot tell
the target it is compiled for (triton.language.target_info reads the active driver, which an ahead-of-time compile
has none of), so the launcher passes NVIDIA_FORMS: true for logits on an NVIDIA GPU (the PTX conversion and the
16-bit max above), false on ROCm and under the interpreter, which take the portable forms: Triton's conversion,
and the max in fp32 after it. On gfx942 (V = 151936, BLOCK_V = 8192, bf16) Triton's conversion compiles to the
same main loop as the shift and mask written in Triton's ops (bitcast, widen, shift): 366 instructions either way,
AMD's compiler already making it one v_lshlrev or v_and a value, so the plain conversion serves. gfx942 has no
bf16 max (LLVM widens, takes the max and rounds back): the max in bf16 costs 488 instructions (15.25 a logit)
against 366 (11.44) in fp32; for fp16, whose max it has, fp32 still costs fewer, 318 against 339.

Logits of -inf or NaN (and masked tail logits) count as LOGIT_FLOOR = -2^30, which weighs exactly 0 next to any
logit above it while every difference and square stays finite, so no branch makes a NaN. It was -1e18; it is now
a power of two so that LOGIT_FLOOR log2 e is exact, and small enough that a chunk made only of such logits still
has finite d and 2^d (with -1e18, 2^(-1e18 log2 e - r) overflowed to NaN). Finite logits below -2^30 count as
-2^30 too: the dtypes' lowest (a masking value some models use) weighs 0 as before; only a row with no logit
above -2^30 would read differently (as uniform over its floor logits), and real logits are O(100).

After the loop, the lanes of a row merge once, in fp64 (once a row: free, and the outputs then carry only the
lanes' fp32 errors): the row max M, each lane's weight and M2 rescaled to M's reference and its mean shifted,
the total weight W, the weighted mean and M2 = sum(M2_lane) + sum(W_lane (mean_lane - mean)^2). Then
logp = (z_x - M) - ln W, mu = E[z - M] - ln W, var = M2 / W (in nats^2) and max_logp = -ln W.

A program handles ROWS rows as [ROWS, LANES, VEC] slices (several rows when the vocabulary is small). The
launch settings come from ``triton.autotune``, keyed on the vocabulary size and ``rows_bucket`` of the row count
(so a choice made for a few rows does not serve millions), over the configs of
TOKEN_STATS_CONFIGS that fit it (``fitting_configs``); the interpreter cannot benchmark, so under it the
kernel runs at ``default_config(vocab_size)``. The interpreter runs the portable forms, as on ROCm (it holds bf16
as raw bits, so a max of them unconverted would be wrong): the values equal the NVIDIA forms'.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# CHUNK is the logits a thread takes from each row a block, BLOCK_V = 32 * num_warps * CHUNK. 64 (8 16-byte loads
# of bf16 or fp16, 16 of fp32) spreads a block's fixed cost (its merge into the lane, the loop, the pipeline's
# barriers) to under 12 SASS instructions a logit; at 32 it is ~13, at 16 ~14. The 8-logit configs serve only
# vocabularies below 2048, whose rows one block covers. Every config takes one row a program: two or four rows a
# program (what small vocabularies used to get) spilled with 16-bit logits (255 registers, sm_80 and sm_90).
TOKEN_STATS_CONFIGS = (
    triton.Config({"ROWS": 1, "BLOCK_V": 8192, "CHUNK": 64}, num_warps=4),
    triton.Config({"ROWS": 1, "BLOCK_V": 4096, "CHUNK": 64}, num_warps=2),
    triton.Config({"ROWS": 1, "BLOCK_V": 2048, "CHUNK": 64}, num_warps=1),
    triton.Config({"ROWS": 1, "BLOCK_V": 1024, "CHUNK": 8}, num_warps=4),
    triton.Config({"ROWS": 1, "BLOCK_V": 512, "CHUNK": 8}, num_warps=2),
)

# Logits at or below it (-inf and NaN included) weigh 0. A power of two, so that its product with log2 e is exact
# in fp32; and small enough that every |logit| * log2 e above it rounds by under 2^6, so no weight e^(rounding)
# overflows (real logits are O(100)).
LOGIT_FLOOR = tl.constexpr(-(2.0**30))
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
# A lane merges one chunk a block (Chan's combine, in fp32): at most this many blocks a row, so that V = 151936
# takes only the 64-logit configs (BLOCK_V >= 2048, <= 75 merges) and the merges' rounding stays below the
# former kernel's (which kept per-logit merges to <= 128 a lane).
MAX_LANE_MERGES = 128
# Past it every config's program count fills the GPU many times over, so one choice serves all larger N.
MAX_ROWS_BUCKET = 65536


def fitting_configs(vocab_size: int) -> list[triton.Config]:
    """The configs, in TOKEN_STATS_CONFIGS order, whose block is no wider than the vocabulary rounded up to a
    power of two and that take at most MAX_LANE_MERGES blocks a row (where no block is that narrow or that
    wide, the blocks nearest to it)."""
    blocks = [config.kwargs["BLOCK_V"] for config in TOKEN_STATS_CONFIGS]
    narrowest = min(max(blocks), triton.cdiv(vocab_size, MAX_LANE_MERGES))
    widest = max(min(blocks), triton.next_power_of_2(vocab_size))
    return [config for config in TOKEN_STATS_CONFIGS if narrowest <= config.kwargs["BLOCK_V"] <= widest]


def default_config(vocab_size: int) -> triton.Config:
    """The config used where autotuning cannot benchmark: the widest fitting block (for V > 4096, BLOCK_V =
    8192 on 4 warps)."""
    return fitting_configs(vocab_size)[0]


def rows_bucket(n_rows: int) -> int:
    """The autotune key's row count: the next power of two of n_rows, at most MAX_ROWS_BUCKET."""
    return min(triton.next_power_of_2(n_rows), MAX_ROWS_BUCKET)


def _prune_to_vocabulary(configs, named_args, **kwargs):
    return fitting_configs(named_args["vocab_size"])


@triton.jit
def _to_fp32(x, NVIDIA_FORMS: tl.constexpr):
    """x as fp32. bf16 on NVIDIA by inline PTX, one instruction a value (a register holds two: the low one shifts
    up, the high one is masked), where the compiler's conversion spends two (a PRMT to unpack, then a shift)."""
    if x.dtype == tl.bfloat16 and NVIDIA_FORMS:
        converted = tl.inline_asm_elementwise(
            "shl.b32 $0, $2, 16;\n and.b32 $1, $2, 0xffff0000;",
            "=r,=r,r",
            [x],
            dtype=tl.float32,
            is_pure=True,
            pack=2,
        )
    else:
        converted = x.to(tl.float32)
    return converted


@triton.jit
def _max_operand(x, NVIDIA_FORMS: tl.constexpr):
    """x for the chunk max: on NVIDIA in its own type (two bf16 or fp16 values a register, one packed max, HMNMX2,
    for two logits, exact), elsewhere in fp32 (see "Why the vendor forms")."""
    if NVIDIA_FORMS:
        operand = x
    else:
        operand = _to_fp32(x, NVIDIA_FORMS)
    return operand


@triton.jit
def _load_chunks(ptrs, start, vocab_size, offsets, K: tl.constexpr, SLICE: tl.constexpr, MASKED: tl.constexpr):
    """A lane's logits of the block at start, as a tuple of K slices [ROWS, LANES, VEC] in fp32 (16-byte loads,
    SLICE logits apart): separate tensors, so that the sums over them below chain into fmas."""
    chunks = ()
    for k in tl.static_range(K):
        if MASKED:
            z = tl.load(
                ptrs + (start + k * SLICE),
                mask=(start + k * SLICE + offsets < vocab_size)[None, :, :],
                other=float("-inf"),
            )
        else:
            z = tl.load(ptrs + (start + k * SLICE))
        chunks = chunks + (z,)
    return chunks


@triton.jit
def _merge_chunks(chunks, run_max, run_weight, run_mean, run_m2, K: tl.constexpr, NVIDIA_FORMS: tl.constexpr):
    """Merges a lane's chunks (its logits of one block, K slices [ROWS, LANES, VEC]) into its running state
    [ROWS, LANES, 1]: max (z units); weight, mean and M2 in base-2 units (y = z log2 e) about the
    reference round(max * log2 e). Sums run along the K slices elementwise (a chain of fmas), then over VEC."""
    top = _max_operand(chunks[0], NVIDIA_FORMS)
    for k in tl.static_range(1, K):
        top = tl.maximum(top, _max_operand(chunks[k], NVIDIA_FORMS))
    chunk_max = tl.maximum(tl.max(_to_fp32(top, NVIDIA_FORMS), axis=2, keep_dims=True), LOGIT_FLOOR)
    chunk_ref = chunk_max * LOG2E
    # y - ref, the product exact in the fma, raised to (LOGIT_FLOOR - chunk_max) log2 e: as if z were raised to
    # LOGIT_FLOOR (NaN-dropping), which weighs exactly 0 next to any logit above it.
    floor = LOGIT_FLOOR * LOG2E - chunk_ref
    ds = ()
    ws = ()
    for k in tl.static_range(K):
        d = tl.maximum(tl.fma(_to_fp32(chunks[k], NVIDIA_FORMS), LOG2E, -chunk_ref), floor)
        ds = ds + (d,)
        ws = ws + (tl.exp2(d),)
    weight_sum = ws[0]
    depth_sum = ws[0] * ds[0]
    for k in tl.static_range(1, K):
        weight_sum = weight_sum + ws[k]
        depth_sum = tl.fma(ws[k], ds[k], depth_sum)
    chunk_weight = tl.sum(weight_sum, axis=2, keep_dims=True)  # >= 1: the max weighs 1
    root = tl.math.rsqrt(chunk_weight)
    chunk_mean = tl.sum(depth_sum, axis=2, keep_dims=True) * (root * root)
    e = ds[0] - chunk_mean
    square_sum = ws[0] * e * e
    for k in tl.static_range(1, K):
        e = ds[k] - chunk_mean
        square_sum = tl.fma(ws[k] * e, e, square_sum)
    chunk_m2 = tl.sum(square_sum, axis=2, keep_dims=True)

    new_max = tl.maximum(run_max, chunk_max)
    new_ref = new_max * LOG2E
    old_shift = run_max * LOG2E - new_ref
    chunk_shift = chunk_ref - new_ref
    old_weight = run_weight * tl.exp2(old_shift)
    chunk_weight = chunk_weight * tl.exp2(chunk_shift)
    total = old_weight + chunk_weight
    root = tl.math.rsqrt(total)
    inverse_total = root * root
    old_mean = run_mean + old_shift
    chunk_mean = chunk_mean + chunk_shift
    gap = old_mean - chunk_mean
    mean = (old_weight * old_mean + chunk_weight * chunk_mean) * inverse_total
    m2 = run_m2 * tl.exp2(old_shift) + chunk_m2 * tl.exp2(chunk_shift)
    m2 = m2 + old_weight * chunk_weight * inverse_total * gap * gap
    return new_max, total, mean, m2


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
    rows_bucket,
    ROWS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    CHUNK: tl.constexpr,
    NVIDIA_FORMS: tl.constexpr,
):
    ELEMENT_BYTES: tl.constexpr = logits_ptr.dtype.element_ty.primitive_bitwidth // 8
    VEC: tl.constexpr = 16 // ELEMENT_BYTES if CHUNK * ELEMENT_BYTES > 16 else CHUNK
    K: tl.constexpr = CHUNK // VEC
    LANES: tl.constexpr = BLOCK_V // CHUNK
    SLICE: tl.constexpr = LANES * VEC
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_live = rows < n_rows
    row_ptrs = logits_ptr + tl.minimum(rows, n_rows - 1) * row_stride  # a dead row reads a live one
    targets = tl.load(targets_ptr + rows, mask=row_live, other=ignore_index)

    # A lane's logits of a block: K chunks of VEC contiguous logits (16-byte loads), SLICE = LANES * VEC apart.
    offsets = (tl.arange(0, LANES) * VEC)[:, None] + tl.arange(0, VEC)[None, :]
    ptrs = row_ptrs[:, None, None] + offsets[None, :, :]

    run_max = tl.full((ROWS, LANES, 1), LOGIT_FLOOR, tl.float32)
    run_weight = tl.zeros((ROWS, LANES, 1), tl.float32)
    run_mean = tl.zeros((ROWS, LANES, 1), tl.float32)
    run_m2 = tl.zeros((ROWS, LANES, 1), tl.float32)
    full_blocks = vocab_size // BLOCK_V
    for block in tl.range(0, full_blocks, num_stages=3):  # cp.async: two blocks in flight meanwhile
        chunks = _load_chunks(ptrs, block * BLOCK_V, vocab_size, offsets, K, SLICE, MASKED=False)
        run_max, run_weight, run_mean, run_m2 = _merge_chunks(
            chunks, run_max, run_weight, run_mean, run_m2, K, NVIDIA_FORMS
        )
    chunks = _load_chunks(ptrs, full_blocks * BLOCK_V, vocab_size, offsets, K, SLICE, MASKED=True)
    run_max, run_weight, run_mean, run_m2 = _merge_chunks(
        chunks, run_max, run_weight, run_mean, run_m2, K, NVIDIA_FORMS
    )

    # [ROWS, LANES, 1] -> [ROWS, LANES] (a reduction over an axis of 1), then the lanes of a row merge once, in
    # fp64 (once a row: free), so that the outputs carry only the lanes' fp32 errors and their own rounding.
    lane_max = tl.max(run_max, axis=2)
    lane_weight = tl.sum(run_weight, axis=2).to(tl.float64)
    lane_mean = tl.sum(run_mean, axis=2).to(tl.float64)
    lane_m2 = tl.sum(run_m2, axis=2).to(tl.float64)
    row_max = tl.max(lane_max, axis=1)
    row_ref = row_max * LOG2E
    lane_shift = (lane_max * LOG2E - row_ref[:, None]).to(tl.float64)  # exact: both are fp32 references
    lane_scale = tl.exp2(lane_shift)
    scaled_weight = lane_weight * lane_scale
    shifted_mean = lane_mean + lane_shift
    weight = tl.sum(scaled_weight, axis=1)
    mean = tl.sum(scaled_weight * shifted_mean, axis=1) / weight
    spread = shifted_mean - mean[:, None]
    m2 = tl.sum(lane_m2 * lane_scale + scaled_weight * spread * spread, axis=1)
    # y - row_ref = (z - row_max) log2 e + rho: rho, the reference's rounding, is exact from an fma.
    rho = tl.fma(row_max, LOG2E, -row_ref).to(tl.float64)
    log_weight = tl.log(weight) - rho * LN2  # log sum e^(z - row_max)
    mu = (mean - rho) * LN2 - log_weight
    var = m2 / weight * (LN2 * LN2)

    valid = targets != ignore_index
    safe_targets = tl.where(valid, targets, 0).to(tl.int64)
    target_logits = tl.load(logits_ptr + rows * row_stride + safe_targets, mask=row_live, other=0.0).to(tl.float32)
    tl.store(
        logp_ptr + rows, tl.where(valid, (target_logits - row_max).to(tl.float64) - log_weight, 0.0), mask=row_live
    )
    tl.store(mu_ptr + rows, tl.where(valid, mu, 0.0), mask=row_live)
    tl.store(var_ptr + rows, tl.where(valid, var, 0.0), mask=row_live)
    tl.store(max_logp_ptr + rows, tl.where(valid, -log_weight, 0.0), mask=row_live)


_token_stats_autotuned = triton.autotune(
    configs=list(TOKEN_STATS_CONFIGS),
    key=["vocab_size", "rows_bucket"],
    prune_configs_by={"early_config_prune": _prune_to_vocabulary},
)(_token_stats_kernel)
# Under TRITON_INTERPRET=1 triton.jit makes an interpreted function, which the autotuner cannot time.
INTERPRETED = not isinstance(_token_stats_kernel, triton.runtime.JITFunction)
_CAN_AUTOTUNE = not INTERPRETED
# The jitted kernel, for benchmarks/kernels_aot.py's compile check (named as the launcher names it).
TOKEN_STATS_KERNEL = _token_stats_kernel


def _torch_private(name: str):
    """``torch.<name>``, for what torch offers only under a private name (the check on the device that the host does
    not wait for), looked up when called."""
    return getattr(torch, name)


def nvidia_forms() -> bool:
    """The kernel's NVIDIA_FORMS: compiled, it runs on a GPU of torch's build, NVIDIA's (CUDA) or AMD's (ROCm, whose
    torch names its GPUs "cuda" too); under the interpreter, on none (the kernels never ask which device they run on:
    what a device runs is decided in mia_fast.pipeline.device)."""
    return not INTERPRETED and torch.version.hip is None


def _check_targets(targets: torch.Tensor, vocab_size: int, ignore_index: int) -> None:
    bad = ((targets < 0) | (targets >= vocab_size)) & (targets != ignore_index)
    message = f"target ids must lie in [0, {vocab_size}) or equal ignore_index={ignore_index}"
    if targets.is_cuda:  # checked on the device, so the host never waits for it inside a pass
        _torch_private("_assert_async")(~bad.any(), message)
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
        arguments = (
            *(rows, rows.stride(0), flat_targets, logp, mu, var, max_logp),
            *(n, vocab_size, ignore_index, rows_bucket(n)),
        )
        forms = nvidia_forms()
        if config is None and _CAN_AUTOTUNE:
            _token_stats_autotuned[lambda meta: (triton.cdiv(n, meta["ROWS"]),)](*arguments, NVIDIA_FORMS=forms)
        else:
            config = config or default_config(vocab_size)
            grid = (triton.cdiv(n, config.kwargs["ROWS"]),)
            _token_stats_kernel[grid](
                *arguments,
                **config.kwargs,
                NVIDIA_FORMS=forms,
                num_warps=config.num_warps,
                num_stages=config.num_stages,
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
