"""Triton kernels against the torch reference and an fp64 ground truth (interpreter on CPU).

Accuracy bar (cut-cross-entropy): |kernel - fp64| <= |eager same-dtype - fp64| + 1e-5, elementwise,
where "eager" is the public code's recipe run in the input dtype (max log p: Gap-K%'s, the max of log_softmax).
"""

import numpy as np
import pytest
import torch

from mia_fast.kernels import token_stats
from mia_fast.ops.token_stats import linear_token_stats, token_stats_torch
from mia_fast.pipeline.stats import TOKEN_STATS_COLUMNS

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def ground_truth(logits: torch.Tensor, targets: torch.Tensor):
    """fp64 logp, mu, var, max logp of the logits exactly as given (after their rounding to the input dtype)."""
    logprobs = torch.log_softmax(logits.double(), -1)
    probs = logprobs.exp()
    mu = torch.where(probs > 0, probs * logprobs, 0).sum(-1)
    var = torch.where(probs > 0, probs * (logprobs - mu[..., None]) ** 2, 0).sum(-1)
    return logprobs.gather(-1, targets[..., None])[..., 0], mu, var, logprobs.amax(-1)


def eager(logits: torch.Tensor, targets: torch.Tensor):
    """The public Min-K%++ recipe, in the logits' own dtype."""
    probs = torch.softmax(logits, -1)
    logprobs = torch.log_softmax(logits, -1)
    mu = (probs * logprobs).sum(-1)
    var = (probs * logprobs.square()).sum(-1) - mu.square()
    return logprobs.gather(-1, targets[..., None])[..., 0], mu, var, logprobs.amax(-1)


def varied_logits(n: int, vocab: int, seed: int) -> torch.Tensor:
    """Rows from flat to fully peaked, with very negative logits mixed in."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=g) * torch.linspace(0.05, 12, n)[:, None]
    logits[0] = 0.0  # exactly uniform
    if n > 2:
        logits[1] = -30.0
        logits[1, vocab // 3] = 40.0  # one token takes (almost) all the mass
        logits[2, : vocab // 2] -= 1e4  # half the vocabulary is effectively impossible
    return logits


def assert_accuracy_bar(logits: torch.Tensor, targets: torch.Tensor, got) -> None:
    truth = ground_truth(logits, targets)
    baseline = eager(logits, targets)
    for name, g, b, t in zip(TOKEN_STATS_COLUMNS, got, baseline, truth, strict=True):
        kernel_error = (g.double() - t).abs()
        eager_error = (b.double() - t).abs().nan_to_num(nan=float("inf"))
        worst = (kernel_error - eager_error - 1e-5).max().item()
        assert worst <= 0, f"{name}: kernel exceeds the eager error by {worst:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, vocab", [(1, 7), (13, 1000), (9, 4099), (5, 50257)])
def test_token_stats_accuracy_bar(n, vocab, dtype):
    logits = varied_logits(n, vocab, seed=vocab).to(dtype).to(DEVICE)
    targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).to(DEVICE)
    assert_accuracy_bar(logits, targets, token_stats(logits, targets))


def test_token_stats_large_vocabulary_bf16():
    logits = varied_logits(3, 151936, seed=1).to(torch.bfloat16).to(DEVICE)
    targets = torch.tensor([5, 151935, 70000], device=DEVICE)
    assert_accuracy_bar(logits, targets, token_stats(logits, targets))


@pytest.mark.parametrize("dtype", DTYPES)
def test_token_stats_match_torch_reference(dtype):
    logits = varied_logits(11, 3001, seed=3).to(dtype).to(DEVICE)
    targets = torch.randint(0, 3001, (11,)).to(DEVICE)
    for got, ref in zip(token_stats(logits, targets), token_stats_torch(logits, targets), strict=True):
        np.testing.assert_allclose(got.cpu(), ref.cpu(), rtol=1e-5, atol=2e-5)


def test_minus_inf_logits_stay_finite_and_exact():
    logits = torch.randn(4, 5000)
    logits[0, :4000] = -float("inf")
    logits[1, 1:] = -float("inf")  # a single possible token: logp 0, mu 0, var 0
    targets = torch.tensor([4500, 0, 17, 4999])
    got = token_stats(logits.to(DEVICE), targets.to(DEVICE))
    for g, t in zip(got, ground_truth(logits, targets), strict=True):
        assert torch.isfinite(g).all()
        np.testing.assert_allclose(g.cpu(), t, rtol=1e-5, atol=1e-5)


def test_ignored_rows_give_zero_sentinels():
    logits = torch.randn(6, 333).to(DEVICE)
    targets = torch.tensor([1, -100, 2, -100, 3, 4]).to(DEVICE)
    logp, *others = token_stats(logits, targets)
    for value in (logp, *others):
        assert (value[targets == -100] == 0).all()
    np.testing.assert_allclose(
        logp[targets != -100].cpu(),
        ground_truth(logits.cpu()[targets.cpu() != -100], targets.cpu()[targets.cpu() != -100])[0],
        rtol=1e-5,
        atol=1e-5,
    )


def test_leading_shape_and_row_stride():
    wide = torch.randn(2, 5, 777 + 9)
    logits = wide[..., :777]  # rows of 777 with a stride of 786
    targets = torch.randint(0, 777, (2, 5))
    got = token_stats(logits.to(DEVICE), targets.to(DEVICE))
    assert all(value.shape == (2, 5) for value in got)
    for g, t in zip(got, ground_truth(logits, targets), strict=True):
        np.testing.assert_allclose(g.cpu(), t, rtol=1e-5, atol=1e-5)


def test_bad_targets_and_dtypes_are_refused():
    with pytest.raises(ValueError, match="target ids must lie in"):
        token_stats(torch.randn(2, 10), torch.tensor([3, 10]))
    with pytest.raises(TypeError, match="fp32, bf16 or fp16"):
        token_stats(torch.randn(2, 10, dtype=torch.float64), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="does not match"):
        token_stats(torch.randn(2, 10), torch.tensor([3]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_linear_equals_matmul_then_token_stats(dtype, with_bias):
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(37, 48, generator=g).to(dtype)
    weight = (torch.randn(1031, 48, generator=g) * 0.5).to(dtype)
    bias = torch.randn(1031, generator=g).to(dtype) if with_bias else None
    targets = torch.randint(0, 1031, (37,), generator=g)
    targets[5] = -100
    logits = torch.nn.functional.linear(hidden, weight, bias)
    expected = token_stats(logits.to(DEVICE), targets.to(DEVICE))
    for chunk_rows, stats_rows in ((1, None), (8, None), (37, 5), (1000, None)):
        got = linear_token_stats(
            hidden.to(DEVICE),
            weight.to(DEVICE),
            targets.to(DEVICE),
            None if bias is None else bias.to(DEVICE),
            chunk_rows=chunk_rows,
            stats_rows=stats_rows,
            impl="triton",
        )
        # Chunks change the matmul's blocking, hence the last bits of the logits.
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a.cpu(), b.cpu(), rtol=1e-5, atol=1e-5)
        keep = targets != -100
        assert_accuracy_bar(logits[keep], targets[keep], [x.cpu()[keep] for x in got])


def test_fused_linear_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="hidden"):
        linear_token_stats(torch.randn(3, 8), torch.randn(10, 9), torch.tensor([1, 2, 3]), chunk_rows=2, impl="triton")
