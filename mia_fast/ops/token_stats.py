"""Per-row token statistics: (logp, mu, var) of each row of logits at its target id.

With w = e^(z - max) and W = sum w: logp = (z_x - max) - log W, mu = E_w[z - max] - log W and
var = E_w[(z - max - E_w[z - max])^2]. Nothing of the size of z itself is ever subtracted and var is
a centred two-pass sum, so the reference stays within about 1e-6 of fp64 (the textbook log_softmax
route loses ~1e-5 in mu); the Triton kernel keeps the same quantities in one streaming pass.
"""

from __future__ import annotations

import torch

from mia_fast.ops.impl import check_impl

# z - max below this is clamped: its weight is 0 anyway, and the square in var must stay finite in fp32.
_LOGP_FLOOR = -1e18


def token_stats_torch(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference: exact per-row (logp, mu, var) in fp32 from logits [N, V] and targets [N]."""
    logits = logits.float()
    shifted = (logits - logits.amax(-1, keepdim=True)).clamp_(min=_LOGP_FLOOR)
    target_shifted = shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    weights = shifted.exp()
    total = weights.sum(-1)
    centred_mean = torch.linalg.vecdot(weights, shifted) / total
    deviation = shifted.sub_(centred_mean.unsqueeze(-1))
    var = torch.linalg.vecdot(weights.mul_(deviation), deviation) / total
    log_total = total.log()
    return target_shifted - log_total, centred_mean - log_total, var


def token_stats(logits: torch.Tensor, targets: torch.Tensor, impl: str = "torch") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp, mu, var) in fp32 of logits [N, V] (any float dtype) at targets [N]."""
    check_impl(impl)
    if impl == "triton":
        from mia_fast.kernels import token_stats as kernel

        return kernel(logits, targets)
    return token_stats_torch(logits, targets)


def linear_token_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    chunk_rows: int,
    stats_rows: int | None = None,
    impl: str = "torch",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logp, mu, var) of logits = hidden @ weight.T (+ bias) without materialising them all.

    hidden [N, H], weight [V, H]. ``chunk_rows`` rows at a time are projected into one reused buffer,
    so the extra memory is O(chunk_rows x V) whatever N, and reduced ``stats_rows`` rows at a time
    (default: the whole chunk). A large projection amortises reading the weight; small reductions
    keep the reference's temporaries in cache.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [N, H] and weight [V, H] expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}")
    stats_rows = stats_rows or chunk_rows
    if chunk_rows < 1 or stats_rows < 1:
        raise ValueError(f"chunk_rows and stats_rows must be positive, got {chunk_rows} and {stats_rows}")
    n, vocab_size = hidden.shape[0], weight.shape[0]
    chunk_rows = min(chunk_rows, max(n, 1))
    buffer = torch.empty((chunk_rows, vocab_size), dtype=hidden.dtype, device=hidden.device)
    outputs = [torch.empty(n, dtype=torch.float32, device=hidden.device) for _ in range(3)]
    weight_t = weight.t()
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        logits = buffer[: stop - start]
        if bias is None:
            torch.matmul(hidden[start:stop], weight_t, out=logits)
        else:
            torch.addmm(bias, hidden[start:stop], weight_t, out=logits)
        for first in range(start, stop, stats_rows):
            last = min(first + stats_rows, stop)
            for out, value in zip(outputs, token_stats(logits[first - start : last - start], targets[first:last], impl)):
                out[first:last] = value
    return tuple(outputs)
