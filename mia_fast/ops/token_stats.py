"""Per-row token statistics: (logp, mu, var, max_logp) of each row of logits at its target id.

With w = e^(z - max) and W = sum w: logp = (z_x - max) - log W, mu = E_w[z - max] - log W,
var = E_w[(z - max - E_w[z - max])^2] and max_logp = max_v log p_v = -log W (the log-probability of the
model's own top choice, from the max every route already keeps). Nothing of the size of z itself is ever
subtracted and var is a centred two-pass sum, so the reference stays within about 1e-6 of fp64 (the textbook
log_softmax route loses ~1e-5 in mu); the Triton kernel keeps the same quantities in one streaming pass.
"""

from __future__ import annotations

import numpy as np
import torch

from mia_fast.ops.backend import implementation, streams_natively, triton_kernel

# z - max below this is clamped: its weight is 0 anyway, and the square in var must stay finite in fp32.
_LOGP_FLOOR = -1e18
# Divides by a total weight that may be 0 (no live logit yet) without making NaN.
_TINY = 1e-30


Stats = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def token_stats_torch(logits: torch.Tensor, targets: torch.Tensor) -> Stats:
    """The reference: exact per-row (logp, mu, var, max_logp) in fp32 from logits [N, V] and targets [N]."""
    logits = logits.float()
    shifted = (logits - logits.amax(-1, keepdim=True)).clamp_(min=_LOGP_FLOOR)
    target_shifted = shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    weights = shifted.exp()
    total = weights.sum(-1)
    centred_mean = torch.linalg.vecdot(weights, shifted) / total
    deviation = shifted.sub_(centred_mean.unsqueeze(-1))
    var = torch.linalg.vecdot(weights.mul_(deviation), deviation) / total
    log_total = total.log()
    return target_shifted - log_total, centred_mean - log_total, var, log_total.neg()


def token_stats(logits: torch.Tensor, targets: torch.Tensor, backend: str = "torch") -> Stats:
    """(logp, mu, var, max_logp) in fp32 of logits [N, V] (any float dtype) at targets [N]."""
    return implementation(backend, token_stats_torch, triton_kernel("token_stats"))(logits, targets)


def linear_token_stats(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    chunk_rows: int,
    stats_rows: int | None = None,
    backend: str = "torch",
) -> Stats:
    """(logp, mu, var, max_logp) of logits = hidden @ weight.T (+ bias) without materialising them all.

    hidden [N, H], weight [V, H]. ``chunk_rows`` rows at a time are projected into one reused buffer,
    so the extra memory is O(chunk_rows x V) whatever N, and reduced ``stats_rows`` rows at a time
    (default: the whole chunk). A large projection amortises reading the weight; small reductions
    keep the reference's temporaries in cache.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden [N, H] and weight [V, H] expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    stats_rows = stats_rows or chunk_rows
    if chunk_rows < 1 or stats_rows < 1:
        raise ValueError(f"chunk_rows and stats_rows must be positive, got {chunk_rows} and {stats_rows}")
    n, vocab_size = hidden.shape[0], weight.shape[0]
    chunk_rows = min(chunk_rows, max(n, 1))
    buffer = torch.empty((chunk_rows, vocab_size), dtype=hidden.dtype, device=hidden.device)
    outputs = [torch.empty(n, dtype=torch.float32, device=hidden.device) for _ in range(4)]
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
            for out, value in zip(
                outputs, token_stats(logits[first - start : last - start], targets[first:last], backend)
            ):
                out[first:last] = value
    return tuple(outputs)


def _native_core():
    """The native core, or None where it was not built (a source checkout without the extension)."""
    try:
        from mia_fast import _native  # noqa: PLC0415  (optional: a source checkout may lack the extension)
    except ImportError:
        return None
    return _native


class StreamedTokenStats:
    """(logp, mu, var, max_logp) of rows whose logits arrive a vocabulary chunk at a time, so no row's logits are ever
    whole: each chunk's weight, weighted mean and centred second moment (about the chunk's own max) are
    merged into running ones with Chan's parallel update, as the Triton kernel merges its lanes.

    On CPU the native core merges each chunk in one fused pass per row segment (fp64 running state); the
    torch reference does it in whole-chunk ops (fp32 running state). ``native`` forces one or the other.
    """

    def __init__(self, targets: torch.Tensor, *, native: bool | None = None) -> None:
        self.targets = targets
        core = _native_core() if streams_natively(targets.device, native=native) else None
        if native and core is None:
            raise RuntimeError("the native core is not built: reinstall mia-fast (pip install -e .)")
        self.core = core
        n, device = len(targets), targets.device
        if core is not None:
            self.target_ids = targets.to(torch.int64).contiguous().numpy()
            self.state = np.zeros((5, n))  # max, weight, centred mean, second moment, target logit
            self.state[0] = -np.inf
            return
        self.max = torch.full((n,), float("-inf"), device=device)
        self.weight = torch.zeros(n, device=device)
        self.mean = torch.zeros(n, device=device)  # E_w[z - max]
        self.m2 = torch.zeros(n, device=device)
        self.target_logit = torch.zeros(n, device=device)

    def add(self, logits: torch.Tensor, first_id: int) -> None:
        """Merges the logits [n, C] of vocabulary ids first_id .. first_id + C - 1 (the reference overwrites them)."""
        if self.core is not None:
            if logits.stride(-1) != 1:
                logits = logits.contiguous()
            values = (
                logits.view(torch.int16).numpy().view("uint16")
                if logits.dtype == torch.bfloat16
                else logits.float().numpy()
            )
            self.core.merge_logit_chunk(values, first_id, self.target_ids, self.state, torch.get_num_threads())
            return
        logits = logits.float()
        inside = (self.targets >= first_id) & (self.targets < first_id + logits.shape[1])
        picked = logits.gather(1, (self.targets - first_id).clamp_(0, logits.shape[1] - 1).unsqueeze(1)).squeeze(1)
        self.target_logit = torch.where(inside, picked, self.target_logit)
        # -inf logits weigh nothing; a chunk (or a whole row so far) of them must not turn into NaN.
        chunk_max = logits.amax(1)
        shift = torch.where(chunk_max > float("-inf"), chunk_max, 0.0)
        shifted = logits.sub_(shift.unsqueeze(1)).clamp_(min=_LOGP_FLOOR)
        weights = shifted.exp()
        weight = weights.sum(1)
        mean = torch.linalg.vecdot(weights, shifted) / weight.clamp(min=_TINY)
        deviation = shifted.sub_(mean.unsqueeze(1))
        m2 = torch.linalg.vecdot(weights.mul_(deviation), deviation)

        new_max = torch.maximum(self.max, chunk_max)
        new_shift = torch.where(new_max > float("-inf"), new_max, 0.0)
        keep, take = (self.max - new_shift).exp(), (chunk_max - new_shift).exp()
        old_weight, new_weight = self.weight * keep, weight * take
        total = old_weight + new_weight
        old_mean = torch.where(self.max > float("-inf"), self.mean + (self.max - new_shift), 0.0)
        new_mean = mean + (shift - new_shift)
        delta = new_mean - old_mean
        self.mean = (old_mean * old_weight + new_mean * new_weight) / total.clamp(min=_TINY)
        self.m2 = self.m2 * keep + m2 * take + delta.square() * old_weight * new_weight / total.clamp(min=_TINY)
        self.weight, self.max = total, new_max

    def result(self) -> Stats:
        if self.core is not None:
            top, weight, mean, m2, target_logit = self.state
            log_weight = np.log(weight)
            return tuple(
                torch.from_numpy(v.astype(np.float32))
                for v in (target_logit - top - log_weight, mean - log_weight, m2 / weight, -log_weight)
            )
        log_weight = self.weight.log()
        return self.target_logit - self.max - log_weight, self.mean - log_weight, self.m2 / self.weight, -log_weight
