"""Per-row token statistics (``ops/token_stats.py``): the reference by hand, the backend asked for, the projection a
chunk of rows at a time (torch and the Triton kernel), and the streamed merge of vocabulary chunks (torch and the
native core) against the whole-row reference."""

import math

import numpy as np
import pytest
import torch

from mia_fast import kernels
from mia_fast.ops.token_stats import StreamedTokenStats, linear_token_stats, token_stats, token_stats_torch
from ops.test_kernels_token_stats import DEVICE, DTYPES, assert_accuracy_bar, varied_logits


def test_the_reference_by_hand():
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3)]])
    logp, mu, var, max_logp = token_stats_torch(logits, torch.tensor([0, 1]))
    half = math.log(0.5)
    quarter, three_quarters = math.log(0.25), math.log(0.75)
    np.testing.assert_allclose(logp, [half, three_quarters], atol=1e-7)
    np.testing.assert_allclose(mu, [half, 0.25 * quarter + 0.75 * three_quarters], atol=1e-7)
    np.testing.assert_allclose(var, [0.0, 0.25 * 0.75 * math.log(3) ** 2], atol=1e-7)
    np.testing.assert_allclose(max_logp, [half, three_quarters], atol=1e-7)


def test_the_torch_impl_is_the_reference_and_an_unknown_impl_is_refused():
    logits, targets = varied_logits(5, 300, seed=1), torch.arange(5) * 7
    for got, expected in zip(token_stats(logits, targets), token_stats_torch(logits, targets), strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="backend must be one of torch, triton, got 'cuda'"):
        token_stats(logits, targets, backend="cuda")


@pytest.mark.parametrize("chunk_rows, stats_rows", [(1, None), (4, 3), (16, None)])
def test_the_projection_a_chunk_at_a_time_equals_the_whole_logits(chunk_rows, stats_rows):
    g = torch.Generator().manual_seed(2)
    hidden, weight, bias = (
        torch.randn(11, 8, generator=g),
        torch.randn(97, 8, generator=g),
        torch.randn(97, generator=g),
    )
    targets = torch.randint(0, 97, (11,), generator=g)
    got = linear_token_stats(hidden, weight, targets, bias, chunk_rows=chunk_rows, stats_rows=stats_rows)
    for value, expected in zip(got, token_stats_torch(hidden @ weight.T + bias, targets), strict=True):
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="chunk_rows and stats_rows must be positive, got 0 and 0"):
        linear_token_stats(hidden, weight, targets, chunk_rows=0)


@pytest.mark.parametrize("native", [False, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_streamed_merge_of_vocabulary_chunks_equals_the_whole_rows(native, dtype):
    logits = varied_logits(6, 1000, seed=3).to(dtype)
    logits[3, :600] = -float("inf")  # the first chunks of a row hold nothing
    targets = torch.tensor([0, 999, 500, 700, 333, 1])
    streamed = StreamedTokenStats(targets, native=native)
    assert (streamed.core is None) == (native is False)  # on CPU the native core is asked for unless turned off
    for first in range(0, 1000, 256):
        streamed.add(logits[:, first : first + 256].clone(), first)
    for got, expected in zip(streamed.result(), token_stats_torch(logits, targets), strict=True):
        torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)


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
    expected = kernels.token_stats(logits.to(DEVICE), targets.to(DEVICE))
    for chunk_rows, stats_rows in ((1, None), (8, None), (37, 5), (1000, None)):
        got = linear_token_stats(
            hidden.to(DEVICE),
            weight.to(DEVICE),
            targets.to(DEVICE),
            None if bias is None else bias.to(DEVICE),
            chunk_rows=chunk_rows,
            stats_rows=stats_rows,
            backend="triton",
        )
        # Chunks change the matmul's blocking, hence the last bits of the logits.
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_allclose(a.cpu(), b.cpu(), rtol=1e-5, atol=1e-5)
        keep = targets != -100
        assert_accuracy_bar(logits[keep], targets[keep], [x.cpu()[keep] for x in got])


def test_fused_linear_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="hidden"):
        linear_token_stats(
            torch.randn(3, 8), torch.randn(10, 9), torch.tensor([1, 2, 3]), chunk_rows=2, backend="triton"
        )


def test_token_stats_match_fp64_definition():
    torch.manual_seed(0)
    logits = torch.randn(37, 1001) * 4
    logits[3] = -1e4
    logits[3, 7] = 30.0  # a fully peaked row
    targets = torch.randint(0, 1001, (37,))
    logp, mu, var, max_logp = token_stats_torch(logits, targets)
    lp = torch.log_softmax(logits.double(), -1)
    p = lp.exp()
    mu64 = (p * lp).sum(-1)
    var64 = (p * lp.square()).sum(-1) - mu64.square()
    np.testing.assert_allclose(logp, lp.gather(-1, targets[:, None])[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mu, mu64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var, var64, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(max_logp, lp.amax(-1), rtol=1e-5, atol=1e-5)
    assert torch.isfinite(var).all() and (var >= 0).all() and (max_logp >= logp).all()


def test_token_stats_survive_minus_inf_logits():
    logits = torch.tensor([[0.0, 1.0, -float("inf"), 2.0]])
    assert all(torch.isfinite(value).all() for value in token_stats_torch(logits, torch.tensor([1])))
