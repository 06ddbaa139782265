"""The vocabulary's mu and var of log p from a server's top-K log-probs, by hand: exact where the known tokens and
one other hold all the mass, the target counted whether among the top K or not, fewer than K returned."""

import math

import numpy as np
import torch

from mia_fast.ops.top_logprobs import approximate_moments


def exact(probabilities) -> tuple[float, float]:
    p = np.asarray(probabilities)
    mu = float((p * np.log(p)).sum())
    return mu, float((p * (np.log(p) - mu) ** 2).sum())


def test_one_unknown_token_holds_the_rest_exactly():
    top = np.log([[0.5, 0.3], [0.5, np.nan]])  # the second position returned one of two
    logp = np.log([0.3, 0.3])  # the target: among the top first, not returned then
    mu, var = approximate_moments(logp, top, np.array([True, False]), vocab_size=3)
    assert mu.dtype == var.dtype == np.float32
    np.testing.assert_allclose(mu, [exact([0.5, 0.3, 0.2])[0]] * 2, rtol=1e-6)
    np.testing.assert_allclose(var, [exact([0.5, 0.3, 0.2])[1]] * 2, rtol=1e-5)


def test_the_rest_is_spread_evenly_and_nothing_is_left_when_the_known_hold_it_all():
    mu, var = approximate_moments(np.log([0.4]), np.log([[0.4]]), np.array([True]), vocab_size=5)
    np.testing.assert_allclose([mu[0], var[0]], exact([0.4, 0.15, 0.15, 0.15, 0.15]), rtol=1e-5)
    mu, var = approximate_moments(np.log([0.25]), np.log([[0.75, 0.25]]), np.array([True]), vocab_size=10)
    np.testing.assert_allclose([mu[0], var[0]], exact([0.75, 0.25]), rtol=1e-5)


def exact_moments(logprobs: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    p = logprobs.exp()
    mu = (p * logprobs).sum(-1)
    return mu.numpy(), ((p * logprobs * logprobs).sum(-1) - mu**2).numpy()


def test_estimate_is_exact_when_the_top_k_is_the_whole_vocabulary():
    torch.manual_seed(0)
    logprobs = torch.log_softmax(torch.randn(7, 40, dtype=torch.float64) * 3, -1)
    targets = torch.randint(0, 40, (7,))
    top, ids = logprobs.topk(40, -1)
    mu, var = approximate_moments(
        logprobs.gather(1, targets[:, None])[:, 0].numpy(), top.numpy(), (ids == targets[:, None]).any(-1).numpy(), 40
    )
    exact_mu, exact_var = exact_moments(logprobs)
    np.testing.assert_allclose(mu, exact_mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(var, exact_var, rtol=1e-5, atol=1e-6)


def test_estimate_spreads_the_mass_left_evenly_and_counts_the_target_outside_the_top():
    # p = (0.5, 0.25, 0.125, 0.125): the top 1 and the target (0.25, outside it) leave 0.25 for two tokens, 0.125
    # each, which is exactly the truth.
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125]], dtype=torch.float64))
    mu, var = approximate_moments(np.log([0.25]), np.log([[0.5]]), np.array([False]), 4)
    exact_mu, exact_var = exact_moments(logprobs)
    np.testing.assert_allclose(mu, exact_mu, rtol=1e-6)
    np.testing.assert_allclose(var, exact_var, rtol=1e-6)
    # The target among the top K is not counted twice; a position whose top K hold all the mass has no remainder.
    mu, var = approximate_moments(np.log([0.5]), np.log([[0.5, 0.5]]), np.array([True]), 1000)
    np.testing.assert_allclose([mu[0], var[0]], [math.log(0.5), 0.0], atol=1e-7)


def test_estimate_leaves_out_what_a_server_did_not_return():
    mu_nan, var_nan = approximate_moments(np.log([0.5]), np.array([[math.log(0.5), np.nan]]), np.array([True]), 3)
    mu, var = approximate_moments(np.log([0.5]), np.array([[math.log(0.5)]]), np.array([True]), 3)
    np.testing.assert_array_equal([mu_nan, var_nan], [mu, var])
