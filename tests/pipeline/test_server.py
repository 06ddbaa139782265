"""The server engine without a model server: the top-K estimate of the vocabulary's moments, the HTTP client's
retries and refusals against small servers made here (one that answers 503 then 200, one that never answers),
and every refusal that comes before a request. The engine against a real vLLM server: tests/test_vllm_scoring.py."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from helpers import refused, write_jsonl

from mia_fast import Detector
from mia_fast.errors import MiaFastError
from mia_fast.ops.top_logprobs import approximate_moments
from mia_fast.pipeline.passes import PLAIN, TopLogprobsReadout
from mia_fast.pipeline.server_client import RequestSettings, ServerClient, ServerConfig, ServerError
from mia_fast.scoring.config import ModelConfig

KEY = "sk-test-0123456789abcdef"


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


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, JSON) of the server's script, recording what it was sent."""

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        server = self.server
        length = int(self.headers.get("Content-Length", 0))
        server.seen.append((self.path, self.headers.get("Authorization"), self.rfile.read(length)))
        status, body = server.script.pop(0) if server.script else (200, {"ok": True})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def scripted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.script, server.seen = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def client_of(server, **settings) -> ServerClient:
    return ServerClient(ServerConfig(f"http://127.0.0.1:{server.server_address[1]}", "m", **settings))


def test_overload_and_restarts_are_retried_with_backoff_then_answered(scripted, monkeypatch):
    monkeypatch.setenv("TEST_KEY", KEY)
    scripted.script = [(503, {"error": {"message": "busy"}}), (429, {"error": "slow down"}), (200, {"answer": 1})]
    logged = []
    client = ServerClient(
        ServerConfig(f"http://127.0.0.1:{scripted.server_address[1]}/v1", "m", api_key_env="TEST_KEY"), logged.append
    )
    assert client.post("v1/completions", {"prompt": [1]}) == {"answer": 1}
    assert [path for path, _, _ in scripted.seen] == ["/v1/completions"] * 3
    assert {auth for _, auth, _ in scripted.seen} == {f"Bearer {KEY}"}
    assert len(logged) == 1 and "HTTP 503 (busy)" in logged[0] and KEY not in logged[0]


def test_retries_stop_at_the_configured_window_in_one_line(scripted):
    scripted.script = [(503, {"error": "down"})] * 50
    start = time.monotonic()
    with pytest.raises(ServerError, match=r"answered HTTP 503 \(down\), retried for 1\.5 s"):
        client_of(scripted, requests=RequestSettings(retry_s=1.5)).get("v1/models")
    assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (401, {"error": "Unauthorized"}, r"refused the key \(HTTP 401: Unauthorized\); check the key in \$TEST_KEY"),
        (404, {"error": {"message": "The model `m` does not exist."}}, r"has no model 'm' or no /v1/models"),
        (
            400,
            {"error": {"message": f"bad request for key {KEY}"}},
            r"refused the request \(HTTP 400: bad .* key \*\*\*\)",
        ),
    ],
)
def test_refusals_are_one_line_at_once_and_never_hold_the_key(scripted, monkeypatch, status, message, expected):
    monkeypatch.setenv("TEST_KEY", KEY)
    scripted.script = [(status, message)]
    with pytest.raises(ServerError, match=expected) as raised:
        client_of(scripted, api_key_env="TEST_KEY").get("v1/models")
    assert len(scripted.seen) == 1 and raised.value.status == status
    assert KEY not in str(raised.value) and "\n" not in str(raised.value)


def test_a_server_that_never_answers_is_one_line_after_the_timeout():
    listener = socket.create_server(("127.0.0.1", 0))  # accepts connections (the kernel's backlog), never answers
    try:
        config = ServerConfig(
            f"http://127.0.0.1:{listener.getsockname()[1]}", "m", requests=RequestSettings(timeout_s=1.0)
        )
        start = time.monotonic()
        with pytest.raises(ServerError, match=r"did not answer within 1 s \(--server-timeout\)"):
            ServerClient(config).post("v1/completions", {})
        assert time.monotonic() - start < 1.0 + 10
    finally:
        listener.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_nothing_listening_is_refused_at_once_when_not_retrying():
    start = time.monotonic()
    with pytest.raises(ServerError, match=r"refuses connections \(is it running\?\)$"):
        ServerClient(ServerConfig(f"http://127.0.0.1:{free_port()}", "m")).get("v1/models", retry=False)
    assert time.monotonic() - start < 1


@pytest.mark.parametrize(
    ("url", "settings", "expected"),
    [
        ("ftp://host/", {}, "the scheme is 'ftp'; a server is reached over http:// or https://"),
        ("http://user:pw@host/", {}, "must not hold a user or password"),
        ("http://host/?key=1", {}, "without a query"),
        ("http://10.1.2.3:8000", {"api_key_env": "TEST_KEY"}, "would cross the network unencrypted"),
        ("http://127.0.0.1:8000", {"api_key_env": "UNSET_TEST_KEY"}, "UNSET_TEST_KEY: that environment variable"),
    ],
)
def test_bad_server_settings_are_refused_before_any_request(monkeypatch, url, settings, expected):
    monkeypatch.setenv("TEST_KEY", KEY)
    monkeypatch.delenv("UNSET_TEST_KEY", raising=False)
    with pytest.raises(MiaFastError, match=expected) as raised:
        ServerClient(ServerConfig(url, "m", **settings))
    assert KEY not in str(raised.value)


def test_plain_http_to_another_host_is_allowed_when_asked(monkeypatch):
    monkeypatch.setenv("TEST_KEY", KEY)
    ServerClient(ServerConfig("http://10.1.2.3:8000", "m", api_key_env="TEST_KEY", insecure_http=True))
    ServerClient(ServerConfig("https://10.1.2.3", "m", api_key_env="TEST_KEY"))


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


def test_a_served_model_is_the_model_of_a_model_config_and_the_server_engine_serves_it():
    from mia_fast.scoring.engines import ENGINES, engine_kind

    server = ServerConfig("http://127.0.0.1:1", "m", tokenizer="t")
    assert engine_kind(server) is ENGINES["server"] and engine_kind("m") is ENGINES["local"]
    assert ModelConfig(model=server).name == "m at http://127.0.0.1:1"
    assert ModelConfig(model=server).recorded_source() == {"model": {"model": "m", "tokenizer": "t"}, "gguf": None}


def test_a_served_model_defaults_to_the_methods_a_server_can_give():
    from mia_fast.scoring.engines import served_default_methods

    assert served_default_methods(ServerConfig("http://h", "m", tokenizer="t")) == (
        "loss",
        "zlib",
        "mink",
        "minkpp_top20",
    )
    assert served_default_methods(ServerConfig("http://h", "m")) == ("loss", "zlib", "mink")
