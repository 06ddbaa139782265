"""The HTTP client of a served model (served.client): retries and refusals against small servers made here
(one that answers 503 then 200, one that never answers), settings refused before any request, and the checks every
value of an answer passes (``json_*``, ``logprob``)."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mia_fast.errors import MiaFastError
from mia_fast.served.client import (
    LOWEST_LOGPROB,
    Malformed,
    RequestSettings,
    ServerClient,
    ServerConfig,
    ServerError,
    json_int,
    json_list,
    json_object,
    json_text,
    logprob,
)

KEY = "sk-test-0123456789abcdef"


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


def test_json_checks_pass_what_they_expect_and_name_what_they_got():
    assert json_object({"a": 1}, "x") == {"a": 1}
    assert json_list([1], "x") == [1]
    assert json_text("t", "x") == "t"
    assert json_int(7, "x") == 7
    with pytest.raises(Malformed, match=r"^choices that is not a list \(\{'a': 1\}\)$"):
        json_list({"a": 1}, "choices")
    with pytest.raises(Malformed, match=r"^a choice that is not an object \(\[1\]\)$"):
        json_object([1], "a choice")
    with pytest.raises(Malformed, match=r"^a token that is not a string \(3\)$"):
        json_text(3, "a token")
    with pytest.raises(Malformed, match=r"not an integer \(True\)"):  # a bool is no index
        json_int(True, "an index")
    with pytest.raises(Malformed, match=r"not an integer \(1\.0\)"):
        json_int(1.0, "an index")
    with pytest.raises(Malformed, match=r"^a rank out of range \(0\)$"):
        json_int(0, "a rank", minimum=1)
    with pytest.raises(Malformed, match="out of range"):
        json_int(2**31, "an index")


def test_a_long_value_is_cut_in_the_line_that_names_it():
    with pytest.raises(Malformed) as raised:
        json_object("x" * 100, "logprobs")
    assert str(raised.value) == f"logprobs that is not an object ({repr('x' * 100)[:37]}...)"


@pytest.mark.parametrize(
    ("value", "expected"), [(-1.5, -1.5), (0, 0.0), (-3, -3.0), (5e-5, 0.0), (LOWEST_LOGPROB, LOWEST_LOGPROB)]
)
def test_a_logprob_in_range_is_a_float_at_most_zero(value, expected):
    got = logprob(value)
    assert type(got) is float and got == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("-1", "not a number"),
        (None, "not a number"),
        (False, "not a number"),
        (math.nan, "not finite"),
        (-math.inf, "not finite"),
        (0.5, "a positive log-prob"),
        (1, "a positive log-prob"),
        (-2e6, r"a log-prob below -1e\+06 \(-2000000\.0\)"),
    ],
)
def test_a_logprob_out_of_range_is_malformed(value, expected):
    with pytest.raises(Malformed, match=expected):
        logprob(value)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"in_flight": 0}, "--in-flight must be positive, got 0"),
        ({"request_tokens": -1}, "--request-tokens must be positive, got -1"),
        ({"timeout_s": 0.0}, "--server-timeout must be positive, got 0.0"),
        ({"retry_s": -1.0}, "--server-retry must be 0 or more seconds, got -1.0"),
    ],
)
def test_request_settings_out_of_range_are_refused(settings, expected):
    with pytest.raises(MiaFastError, match=expected):
        RequestSettings(**settings)
    assert RequestSettings(retry_s=0.0).retry_s == 0.0  # no retries is a choice


def test_a_server_config_names_its_model_and_shows_its_url_masked(monkeypatch):
    monkeypatch.setenv("TEST_KEY", KEY)
    config = ServerConfig(f"https://gateway.example/{KEY}/v1", "m", api_key_env="TEST_KEY")
    assert config.shown_url == "https://gateway.example/***/v1"
    assert config.name == "m at https://gateway.example/***/v1"
    with pytest.raises(MiaFastError, match="--server needs --server-model NAME"):
        ServerConfig("http://127.0.0.1:8000", "")
    with pytest.raises(MiaFastError, match="not a variable's name") as raised:
        ServerConfig("http://127.0.0.1:8000", "m", api_key_env=KEY)
    assert KEY not in str(raised.value)
