"""The Triton kernels prove themselves on first use: the first time a process runs them on a device, for logits of a
dtype and a vocabulary, each kernel's result is compared with the torch reference's on a small input drawn to reach
its special paths. No test here runs a kernel compiled for a GPU (CI runs them in Triton's interpreter, which swaps
out their GPU-only forms), so a new GPU, driver or Triton release that computes one wrong is caught here, before it
scores anything.

- ``token_stats`` at the model's own vocabulary and at the default launch config for it (the one compiled for the run
  anyway: nothing more is compiled and nothing autotuned): a plain row, a peaked row, a row of -inf but for three
  logits (whole blocks of -inf, one finite logit in the last, partly masked, block) and a row at the ignore index;
- the per-text reductions (bottom-k means, the capped first-occurrence mean) over texts of 0, 1, 7 and 300
  positions, with ties and -inf.

Tolerances are the kernel tests' own (``tests/ops``).
"""

from __future__ import annotations

import importlib

import numpy as np
import torch

from mia_fast.ops.bottom_k import bottom_k_means
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean, first_occurrence_mask
from mia_fast.ops.token_stats import token_stats_torch

IGNORE_INDEX = -100
TOKEN_STATS_TOLERANCE = {"rtol": 1e-5, "atol": 2e-5}
REDUCTION_TOLERANCE = {"rtol": 1e-6, "atol": 1e-6}
PROBE_KS = (0.05, 0.2, 0.5, 1.0)
PROBE_LENGTHS = (0, 1, 7, 300)

_verdicts: dict[tuple[str, torch.dtype, int], str | None] = {}


def kernels_disagree(device: torch.device, dtype: torch.dtype, vocab_size: int) -> tuple[str | None, bool]:
    """Why the Triton kernels cannot be trusted on ``device`` for ``dtype`` logits of ``vocab_size`` (the first
    kernel whose result differs from the reference's, or that failed, and by how much), None where all agree; and
    whether this call found it out (False: an earlier call of this process did, and said so)."""
    key = (str(device), dtype, vocab_size)
    if key in _verdicts:
        return _verdicts[key], False
    verdict = _first_disagreement(device, dtype, vocab_size)
    _verdicts[key] = verdict
    return verdict, True


def _first_disagreement(device: torch.device, dtype: torch.dtype, vocab_size: int) -> str | None:
    for name, check in (
        ("token_stats", lambda: _check_token_stats(device, dtype, vocab_size)),
        ("bottom_k_means", lambda: _check_bottom_k(device)),
        ("capped_first_occurrence_mean", lambda: _check_capped_mean(device)),
    ):
        try:
            difference = check()
        except Exception as exc:  # a kernel that cannot compile or launch here is the finding
            return f"the {name} kernel failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if difference is not None:
            return f"the {name} kernel differs from the torch reference by {difference:.3g}"
    return None


def _beyond(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> float | None:
    """The largest |got - want| where it exceeds atol + rtol |want| (infinite where one is NaN or infinite and the
    other not), else None."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        error = np.where(same, 0.0, np.abs(got - want))
    error = np.where(np.isnan(error), np.inf, error)
    if np.all(error <= atol + rtol * np.abs(np.nan_to_num(want))):
        return None
    return float(error.max())


def _probe_logits(dtype: torch.dtype, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn((4, vocab_size), generator=generator, dtype=torch.float32) * 3
    logits[1, vocab_size // 3] = 30.0
    finite = [0, vocab_size // 2, vocab_size - 1]
    logits[2] = float("-inf")
    logits[2, finite] = torch.tensor([1.0, 2.5, -0.5])
    targets = torch.tensor([7 % vocab_size, vocab_size // 3, vocab_size - 1, IGNORE_INDEX])
    return logits.to(dtype).to(device), targets.to(device)


def _check_token_stats(device: torch.device, dtype: torch.dtype, vocab_size: int) -> float | None:
    # By module name (the package re-exports a function called token_stats); triton is optional: imported here.
    kernel = importlib.import_module("mia_fast.kernels.token_stats")
    logits, targets = _probe_logits(dtype, vocab_size, device)
    got = kernel.token_stats_with_config(logits, targets, kernel.default_config(vocab_size), IGNORE_INDEX)
    scored = targets != IGNORE_INDEX
    want = token_stats_torch(logits[scored], targets[scored])
    worst = None
    for got_column, want_column in zip(got, want, strict=True):
        got_column = got_column.cpu().numpy()
        for found in (
            _beyond(got_column[scored.cpu().numpy()], want_column.cpu().numpy(), **TOKEN_STATS_TOLERANCE),
            _beyond(got_column[~scored.cpu().numpy()], np.zeros(int((~scored).sum())), 0.0, 0.0),
        ):
            if found is not None:
                worst = max(worst or 0.0, found)
    return worst


def _probe_values() -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(0)
    values = generator.normal(size=sum(PROBE_LENGTHS)).astype(np.float32)
    values[10:20] = values[10]  # ties
    values[50] = -np.inf
    return values, np.concatenate([[0], np.cumsum(PROBE_LENGTHS)]).astype(np.int64)


def _check_bottom_k(device: torch.device) -> float | None:
    values, offsets = _probe_values()
    got = bottom_k_means(values, offsets, PROBE_KS, backend="triton", device=device)
    want = bottom_k_means(values, offsets, PROBE_KS, backend="torch")
    return _beyond(got, want, **REDUCTION_TOLERANCE)


def _check_capped_mean(device: torch.device) -> float | None:
    values, offsets = _probe_values()
    values = np.where(np.isfinite(values), values, -30.0).astype(np.float32)
    ids = (np.arange(len(values)) * 7 % 50).astype(np.int64)
    log_frequencies = np.log(np.linspace(1e-6, 1e-2, 50))
    arguments = (ids, values, first_occurrence_mask(ids, offsets), offsets, log_frequencies, 2.0)
    got = capped_first_occurrence_mean(*arguments, backend="triton", device=device)
    want = capped_first_occurrence_mean(*arguments, backend="torch")
    return _beyond(got, want, **REDUCTION_TOLERANCE)
