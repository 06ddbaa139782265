"""The server engine without a model server: the top-K estimate of the vocabulary's moments and every refusal that
comes before a request. The HTTP client: test_server_client.py; the engine against a real vLLM server:
tests/test_vllm_scoring.py."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from helpers import refused, write_jsonl

from mia_fast import Detector
from mia_fast.ops.top_logprobs import approximate_moments
from mia_fast.pipeline.passes import PLAIN, TopLogprobsReadout
from pipeline.test_server_client import free_port


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


def test_a_local_model_estimates_from_its_own_top_k_and_is_exact_with_the_whole_vocabulary(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    texts = ["the quick brown fox jumps over the lazy dog " * 10, "to be or not to be", ""]
    exact = detector.target.run(PLAIN.readout, texts)
    vocabulary = detector.target.loaded.vocab_size
    estimated = detector.target.run(TopLogprobsReadout(vocabulary), texts)
    np.testing.assert_array_equal(estimated.target_ids, exact.target_ids)
    np.testing.assert_allclose(estimated.logp, exact.logp, atol=1e-5)
    np.testing.assert_allclose(estimated.mu, exact.mu, atol=1e-4)
    np.testing.assert_allclose(estimated.var, exact.var, atol=1e-3)
    scores = detector.score(texts, ["minkpp", "minkpp_top5", "minkpp_top20"], [0.5])
    assert set(scores) == {"minkpp_0.5", "minkpp_top5_0.5", "minkpp_top20_0.5"}
    assert np.isnan(scores["minkpp_top5_0.5"][2])


@pytest.mark.parametrize(
    ("methods", "extra", "expected"),
    [
        ("loss,minkpp", [], "'minkpp' needs the exact mean and variance of log p over the whole vocabulary"),
        ("minkpp_top20", [], "'minkpp_top20' needs the vocabulary's size, .*: give --tokenizer NAME"),
        ("gradnorm", [], "'gradnorm' needs the model's gradients, which a server does not return"),
        ("loss", ["--model", "x"], "give the target model once"),
    ],
)
def test_what_a_server_cannot_give_is_refused_before_connecting(tmp_path, capsys, methods, extra, expected):
    data = tmp_path / "in.jsonl"
    write_jsonl(data, [{"text": "some text"}])
    server = ["--server", f"http://127.0.0.1:{free_port()}", "--server-model", "m"]
    line = refused(
        capsys, "score", data, *server, "--methods", methods, *extra, "--out", tmp_path / "o.jsonl", keep=[tmp_path]
    )
    assert pytest.importorskip("re").search(expected, line), line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--server", "http://127.0.0.1:1"], "--server needs --server-model NAME"),
        (["--server-model", "m"], "--server-model need(s) --server URL"),
        (["--tokenizer", "t", "--api-key-env", "V"], "--api-key-env, --tokenizer need(s) --server URL"),
        (["--server", "http://127.0.0.1:1", "--server-model", "m", "--in-flight", "0"], "--in-flight"),
    ],
)
def test_server_options_are_checked_as_they_are_parsed(tmp_path, capsys, args, expected):
    data = tmp_path / "in.jsonl"
    write_jsonl(data, [{"text": "some text"}])
    line = refused(capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path])
    assert expected in line, line


def test_an_unreachable_server_is_one_line_within_seconds(tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    write_jsonl(data, [{"text": "some text"}])
    start = time.monotonic()
    line = refused(
        capsys,
        "score",
        data,
        "--server",
        f"http://127.0.0.1:{free_port()}",
        "--server-model",
        "m",
        "--methods",
        "loss",
        "--out",
        tmp_path / "o.jsonl",
        keep=[tmp_path],
    )
    assert "refuses connections (is it running?)" in line and time.monotonic() - start < 10
