"""The vocabulary's mu and var of log p from a server's top-K log-probs, by hand: exact where the known tokens and
one other hold all the mass, the target counted whether among the top K or not, fewer than K returned."""

import numpy as np

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
