"""The server engine without a model server: a local model's own top-K estimate, and every refusal that comes
before a request (the estimate by hand: tests/ops/test_top_logprobs.py). The HTTP client: test_client.py;
the engine against a real vLLM server: tests/test_vllm_scoring.py."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import refused, write_jsonl

from mia_fast import Detector
from mia_fast.engines.passes import PLAIN, TopLogprobsReadout
from served.test_client import free_port


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
