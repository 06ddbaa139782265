"""HTTP to a model behind an OpenAI-compatible completions endpoint (vLLM, SGLang, TGI, llama.cpp, hosted APIs).

Only the standard library: one connection per request (a request carries many prompts), TLS verified, a connect
timeout apart from the answer's (a deadline for the whole answer, however slowly it trickles in), and bounded
retries with exponential backoff and jitter for what a server restart, overload or a dropped connection causes
(429, 5xx, a refused or reset connection). Everything else (a bad key, an unknown model, a bad request, an answer
that never comes or is malformed) is one line at once. The key is read from an environment variable, sent only in
the Authorization header, and hidden in every string of every answer as it is decoded, so no message or file
made of a server's answers holds it.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import math
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mia_fast.errors import MiaFastError
from mia_fast.served.url import endpoint, environment_key, hide_key, key_variable, masked_url

# Seconds to open a connection: a host that takes longer is unreachable (the answer has its own timeout).
CONNECT_TIMEOUT_S = 5.0
# Backoff between retries: BASE * 2^attempt, at most CAP, times a jitter in [0.5, 1.5).
RETRY_BASE_S = 0.5
RETRY_CAP_S = 8.0
_RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_DROPPED = (ConnectionError, http.client.RemoteDisconnected, http.client.IncompleteRead, http.client.BadStatusLine)


def _positive(value: float, what: str) -> None:
    if not value > 0:
        raise MiaFastError(f"{what} must be positive, got {value}")


@dataclass(frozen=True)
class RequestSettings:
    """How requests go: how many in flight at once, prompt tokens per request, the seconds an answer may take, and
    how long failed connections and 429/5xx answers are retried (a restart, an overload)."""

    in_flight: int = 4
    request_tokens: int = 8192
    timeout_s: float = 300.0
    retry_s: float = 180.0

    def __post_init__(self) -> None:
        for value, what in (
            (self.in_flight, "--in-flight"),
            (self.request_tokens, "--request-tokens"),
            (self.timeout_s, "--server-timeout"),
        ):
            _positive(value, what)
        if self.retry_s < 0:
            raise MiaFastError(f"--server-retry must be 0 or more seconds, got {self.retry_s}")


@dataclass(frozen=True)
class ServerConfig:
    """A model served over HTTP: the server's base ``url`` (``http://127.0.0.1:8000``, ``https://host/v1``), the
    ``model`` name it serves, the environment variable holding its API key (never the key itself), the tokenizer
    to load here (a hub name or directory: token ids are then sent, so both sides agree on them; None: the
    server tokenizes), whether a key may go over plain HTTP to a host other than this one, and how requests go."""

    # What a run records of it (``scores``): the model served and the tokenizer; the URL may change, the key
    # variable and the request settings change no score.
    url: str
    model: str = field(metadata={"scores": True})
    api_key_env: str | None = None
    tokenizer: str | None = field(default=None, metadata={"scores": True})
    insecure_http: bool = False
    requests: RequestSettings = field(default_factory=RequestSettings)

    def __post_init__(self) -> None:
        if not self.model:
            raise MiaFastError("--server needs --server-model NAME: the model name the server serves")
        if self.api_key_env is not None:
            key_variable(self.api_key_env)
        try:
            endpoint(self.url)
        except MiaFastError as refused:
            raise MiaFastError(hide_key(str(refused), self._key_in_environment())) from None

    @property
    def name(self) -> str:
        """The served model as a line names it: its name and where it is served."""
        return f"{self.model} at {self.shown_url}"

    @property
    def shown_url(self) -> str:
        """The URL as a line or a file may show it: its user part and query values masked, and the key hidden (some
        gateways take it in the path)."""
        return hide_key(masked_url(self.url), self._key_in_environment())

    def _key_in_environment(self) -> str | None:
        return environment_key(self.api_key_env)


class ServerError(MiaFastError):
    """A server's answer that no retry changes; ``status`` is its HTTP status, where it gave one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerClient:
    """Requests to one server, retried as the module docstring says; ``log`` gets a line when a failure streak
    starts retrying."""

    def __init__(self, config: ServerConfig, log: Callable[[str], None] = lambda message: None) -> None:
        self.config = config
        self.endpoint = endpoint(config.url)
        self.log = log
        self._key = self._read_key()
        self._tls = ssl.create_default_context() if self.endpoint.scheme == "https" else None

    def _read_key(self) -> str | None:
        variable = self.config.api_key_env
        if variable is None:
            return None
        key = environment_key(variable)
        if key is None:
            raise MiaFastError(f"--api-key-env {variable}: that environment variable is not set or empty")
        if self.endpoint.scheme == "http" and not self.endpoint.loopback and not self.config.insecure_http:
            raise MiaFastError(
                f"the key would cross the network unencrypted to {self.endpoint.host}: use https://, or pass "
                "--insecure-http if this network is trusted"
            )
        return key

    def _hidden(self, text: str) -> str:
        return hide_key(text, self._key)

    def _hidden_in(self, value: Any) -> Any:
        """A decoded JSON answer with the key hidden in every string, keys and values: a server (or a proxy) that
        echoes the Authorization header cannot put the key in any line or file made of its answers."""
        if isinstance(value, str):
            return self._hidden(value)
        if isinstance(value, list):
            return [self._hidden_in(item) for item in value]
        if isinstance(value, dict):
            return {self._hidden(key): self._hidden_in(item) for key, item in value.items()}
        return value

    @contextmanager
    def reading(self, path: str) -> Iterator[None]:
        """Turns a ``Malformed`` answer to ``path`` into one line naming the server, the request and the fault."""
        try:
            yield
        except Malformed as fault:
            raise ServerError(
                f"{self.where} answered /{path} with {fault}: the server's fault, not the texts'"
            ) from None

    def post(self, path: str, body: dict[str, Any], *, retry: bool = True) -> dict[str, Any]:
        """The JSON answer to POST ``path`` (under the base URL, e.g. ``v1/completions``); with ``retry``, failures a
        restart or overload causes are retried for up to ``config.retry_s`` seconds."""
        return self._request("POST", path, body, retry=retry)

    def get(self, path: str, *, retry: bool = True) -> dict[str, Any]:
        return self._request("GET", path, None, retry=retry)

    def _request(self, method: str, path: str, body: dict[str, Any] | None, *, retry: bool) -> dict[str, Any]:
        deadline = time.monotonic() + (self.config.requests.retry_s if retry else 0.0)
        attempt = 0
        while True:
            try:
                return self._once(method, path, body)
            except _Retryable as failure:
                pause = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt) * random.uniform(0.5, 1.5)
                if time.monotonic() + pause > deadline:
                    waited = f", retried for {self.config.requests.retry_s:g} s (--server-retry)" if attempt else ""
                    raise ServerError(f"{self.where} {failure}{waited}", failure.status) from None
                if attempt == 0:
                    self.log(f"{self.where} {failure}: retrying for up to {self.config.requests.retry_s:g} s")
                attempt += 1
                time.sleep(pause)

    @property
    def where(self) -> str:
        return self._hidden(f"the server at {self.endpoint}")

    def _connect(self) -> http.client.HTTPConnection:
        host, port = self.endpoint.host, self.endpoint.port
        if self._tls is not None:
            connection = http.client.HTTPSConnection(host, port, timeout=CONNECT_TIMEOUT_S, context=self._tls)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
        unreachable = f"cannot reach {self.where}"
        try:
            connection.connect()
        except TimeoutError:
            raise ServerError(f"{unreachable}: no answer to connecting within {CONNECT_TIMEOUT_S:g} s") from None
        except socket.gaierror as exc:
            raise ServerError(f"{unreachable}: unknown host ({exc.strerror})") from None
        except ssl.SSLError as exc:
            raise ServerError(f"{self.where} failed TLS verification: {exc.reason or exc}") from None
        except ConnectionRefusedError:
            raise _Retryable("refuses connections (is it running?)") from None
        except OSError as exc:
            raise ServerError(f"{unreachable}: {exc.strerror or exc}") from None
        timeout_s = self.config.requests.timeout_s
        connection.sock.settimeout(timeout_s)
        connection.response_class = functools.partial(_TimedResponse, deadline=time.monotonic() + timeout_s)
        return connection

    def _once(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        payload = json.dumps(body).encode() if body is not None else None
        connection = self._connect()
        try:
            connection.request(method, f"{self.endpoint.base}/{path}", body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except TimeoutError:
            raise ServerError(
                f"{self.where} did not answer within {self.config.requests.timeout_s:g} s (--server-timeout)"
            ) from None
        except _DROPPED as exc:
            raise _Retryable(f"dropped the connection ({type(exc).__name__})") from None
        except http.client.HTTPException as exc:
            raise ServerError(f"{self.where} answered /{path} with broken HTTP ({type(exc).__name__})") from None
        finally:
            connection.close()
        if response.status in _RETRIED_STATUSES:
            raise _Retryable(f"answered HTTP {response.status} ({self._hidden(_error_text(data))})", response.status)
        if response.status != 200:
            raise self._refusal(response.status, data, path)
        try:
            answer = json.loads(data)
            if self._key and _may_spell(self._key, data):
                answer = self._hidden_in(answer)
        except (ValueError, RecursionError):
            raise ServerError(f"{self.where} answered /{path} with something that is not JSON") from None
        with self.reading(path):
            return json_object(answer, "JSON")

    def _refusal(self, status: int, data: bytes, path: str) -> ServerError:
        said = self._hidden(_error_text(data))
        if status in (401, 403):
            fix = (
                f"check the key in ${self.config.api_key_env}"
                if self._key
                else "it wants a key: put it in an environment variable and pass --api-key-env VAR"
            )
            return ServerError(f"{self.where} refused the key (HTTP {status}: {said}); {fix}", status)
        if status == 404:
            return ServerError(
                f"{self.where} has no model {self.config.model!r} or no /{path} (HTTP 404: {said})", status
            )
        return ServerError(f"{self.where} refused the request (HTTP {status}: {said})", status)


class _Retryable(Exception):
    """A failure that a retry may mend: its text completes 'the server at URL ...'."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


# What each of JSON's short escapes stands for.
_SHORT_ESCAPES = {
    '"': b'\\"',
    "\\": b"\\\\",
    "/": b"\\/",
    "\b": b"\\b",
    "\f": b"\\f",
    "\n": b"\\n",
    "\r": b"\\r",
    "\t": b"\\t",
}


def _may_spell(key: str, data: bytes) -> bool:
    """Whether a string of the JSON ``data`` may hold ``key`` once decoded: only where the bytes hold it as it is, or
    an escape that can stand for one of its characters (``\\uXXXX`` for any). Hiding the key walks every string of
    an answer, which costs more than decoding it: most answers are spared."""
    if key.encode() in data or b"\\u" in data:
        return True
    return any(_SHORT_ESCAPES[character] in data for character in set(key) & _SHORT_ESCAPES.keys())


def _error_text(data: bytes, limit: int = 300) -> str:
    """The message of a server's error answer (OpenAI's ``{"error": {"message": ...}}`` or plain text), on one
    line."""
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        parsed = data.decode("utf-8", "replace")
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed.get("detail", parsed.get("message", parsed)))
        parsed = error.get("message", error) if isinstance(error, dict) else error
    text = " ".join(str(parsed).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read finishing by ``deadline`` (``time.monotonic``): the socket's own timeout bounds
    one read only, and a server sending a byte at a time would hold a run for as long as it likes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock, self._raw, self._deadline = sock, sock.makefile("rb", buffering=0), deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self._sock.settimeout(left)
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _TimedResponse(http.client.HTTPResponse):
    """An HTTP response whose status line, headers and body are read in all by ``deadline``."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp.close()
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline))


# The log-probs a server may give. A hair above 0 is a float32 log-softmax of a token the model is sure of, rounded
# (taken as 0); more is a probability above 1. Far below is no model's (vLLM writes -inf as -9999), and would
# overflow the float32 sums that make the scores.
LOGPROB_TOLERANCE = 1e-4
LOWEST_LOGPROB = -1e6
_INT32_MAX = 2**31 - 1


class Malformed(Exception):
    """What an answer holds that it should not; its text completes 'answered /PATH with ...' (``ServerClient.reading``
    makes it one line). The checks below are the one place where a server's answer is checked."""


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Malformed(f"{what} that is not an object ({_shown(value)})")
    return value


def json_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise Malformed(f"{what} that is not a list ({_shown(value)})")
    return value


def json_int(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{what} that is not an integer ({_shown(value)})")
    if not minimum <= value <= _INT32_MAX:
        raise Malformed(f"{what} out of range ({_shown(value)})")
    return value


def json_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise Malformed(f"{what} that is not a string ({_shown(value)})")
    return value


def logprob(value: Any) -> float:
    """A log-prob as a server must give it: a number from ``LOWEST_LOGPROB`` to 0 (up to ``LOGPROB_TOLERANCE``, taken
    as 0)."""
    if type(value) is float and LOWEST_LOGPROB <= value <= LOGPROB_TOLERANCE:  # nearly all of them, at once
        return min(value, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Malformed(f"a log-prob that is not a number ({_shown(value)})")
    if isinstance(value, float) and not math.isfinite(value):
        raise Malformed(f"a log-prob that is not finite ({value})")
    if value > LOGPROB_TOLERANCE:
        raise Malformed(f"a positive log-prob ({_shown(value)}), the log of a probability above 1")
    if value < LOWEST_LOGPROB:
        raise Malformed(f"a log-prob below {LOWEST_LOGPROB:g} ({_shown(value)})")
    return min(float(value), 0.0)
