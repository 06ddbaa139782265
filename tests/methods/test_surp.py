"""SURP on hand-built TokenStats: the formula, the public code's edge rules, and that a text's score depends on
nothing but its own tokens."""

import numpy as np
import pytest
from helpers import check_scores_alone, token_stats
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast import MethodSettings, ScoringInputs, SurpSettings, TokenStats, resolve_methods, score_stats


def scores(stats: TokenStats, methods: list[str], *settings) -> dict[str, np.ndarray]:
    return score_stats(ScoringInputs(stats=stats, settings=MethodSettings(*settings)), resolve_methods(methods))


def test_surp_averages_the_lowest_k_tokens_the_model_was_confident_about():
    text = {"logp": [-5.0, -1.0, -3.0, -0.5, -4.0], "mu": [-1.0, -3.0, -0.5, -1.0, -2.5]}  # entropy = -mu
    got = scores(token_stats(text), ["surp_0.2", "surp_0.4", "surp_0.6", "surp_1.0"])
    assert got["surp_0.2"][0] == -5.0  # int(1.0) = 1 lowest: position 0, entropy 1 < 2
    assert got["surp_0.4"][0] == -5.0  # positions 0 and 4; 4 has entropy 2.5
    assert got["surp_0.6"][0] == pytest.approx(-4.0)  # + position 2 (entropy 0.5)
    assert got["surp_1.0"][0] == pytest.approx(np.mean([-5.0, -3.0, -0.5]))
    loose = scores(token_stats(text), ["surp_0.4"], SurpSettings(max_entropy=3.0))["surp_0.4"]
    assert loose[0] == pytest.approx(-4.5)


def test_surp_scores_nothing_surprising_as_the_public_code_does_and_no_token_as_nan():
    confident_nowhere = {"logp": [-5.0, -1.0, -3.0], "mu": [-4.0, -4.0, -4.0]}
    got = scores(token_stats(confident_nowhere, {"logp": [-1.0, -2.0]}, {"logp": []}), ["surp_0.2", "surp_1.0"])
    assert got["surp_1.0"][0] == -100.0  # no confident position
    assert got["surp_0.2"][1] == -100.0  # int(0.4) = 0 tokens taken
    assert np.isnan(got["surp_0.2"][2]) and np.isnan(got["surp_1.0"][2])


def test_surp_takes_tied_log_probs_in_position_order():
    text = {"logp": [-2.0, -2.0, -1.0, -2.0], "mu": [-3.0, -1.0, -1.0, -1.0]}  # the first -2 is not confident
    assert scores(token_stats(text), ["surp_0.5"])["surp_0.5"][0] == -2.0  # positions 0 and 1: only 1 counts
    assert scores(token_stats(text), ["surp_0.25"])["surp_0.25"][0] == -100.0  # position 0 alone


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=2, max_size=6), st.integers(0, 2**31 - 1))
def test_a_texts_score_does_not_depend_on_the_texts_scored_with_it(lengths, seed):
    check_scores_alone(["surp"], lengths, seed)
