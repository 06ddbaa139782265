"""A model server that misbehaves on purpose, for the tests and ``scripts/bad_inputs.py``.

It answers as vLLM's OpenAI-compatible server does for a small model (``/v1/models``, ``/tokenize``,
``/v1/completions`` with ``prompt_logprobs``, or ``echo`` with ``logprobs``, and samples), except in the one way its
behaviour names (``BEHAVIOURS``). Standard library only::

    with serving("nan") as url:
        ...  # mia-fast score DATA --server URL --server-model tiny --methods loss

Options: ``model`` (the name served), ``max_model_len``, ``drip_s`` (the pause between bytes of ``slow_drip``),
``echo_only`` (refuse ``prompt_logprobs`` with HTTP 400, as a server without it does, so that the client falls
back to ``echo``), ``status`` (the HTTP status of ``refuse_echo_key``) and ``escape_key`` (``echo_key`` writes the
key's characters as JSON's ``\\uXXXX`` escapes, so that it is not in the answer's bytes as it is) and ``root``
(what ``/v1/models`` says the model was loaded from; by default ``/models/NAME``, which is nowhere).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BEHAVIOURS = {
    "good": "answers as vLLM does",
    "models_list": "/v1/models answers a JSON list, not an object",
    "models_data_not_list": "the data of /v1/models is an object, not a list",
    "max_model_len_string": "max_model_len is a string",
    "completions_list": "/v1/completions answers a JSON list, not an object",
    "choices_missing": "a completions answer has no choices",
    "choices_not_list": "the choices of a completions answer are an object, not a list",
    "logprob_string": "every log-prob is the string 'abc'",
    "bare_float": "every prompt_logprobs entry is the number 1.5, not an object",
    "bare_logprob": "every prompt_logprobs entry maps a token to a bare log-prob, not to an object",
    "nan": "every log-prob of a prompt token is NaN",
    "inf": "every log-prob of a prompt token is +Infinity",
    "positive": "every log-prob of a prompt token is 0.5",
    "far_below": "every log-prob of a prompt token is -1e300 (finite, but -inf in float32)",
    "rank_string": "every rank is a string",
    "top_logprobs_not_dict": "every echo top_logprobs entry is a list, not an object",
    "tokens_missing": "/tokenize answers no tokens",
    "tokens_strings": "/tokenize answers token ids as strings",
    "tokens_floats": "/tokenize answers token ids as floats",
    "tokens_bools": "/tokenize answers token ids as booleans",
    "tokens_negative": "/tokenize answers negative token ids",
    "sample_no_index": "samples come without their index",
    "sample_text_not_string": "the text of a sample is a number",
    "slow_drip": "every answer is sent a byte at a time, drip_s seconds apart",
    "echo_key": "the Authorization header and the bare key are copied into every string of every answer",
    "refuse_echo_key": "every request is refused with HTTP status, the Authorization header in the message",
}
DEFAULTS = {
    "model": "tiny",
    "max_model_len": 2048,
    "drip_s": 0.5,
    "echo_only": False,
    "status": 401,
    "escape_key": False,
    "root": None,
}
START_ID = 1  # what /tokenize puts first, as a tokenizer's start token
FINGERPRINT = "faulty-server-1"
ROUTES = ("/v1/models", "/v1/completions", "/tokenize")


def tokenize(text: str) -> list[int]:
    return [START_ID] + [3 + byte for byte in text.encode()]


def token_text(token: int) -> str:
    return f"t{token}"


def ranked(target: int, top: int) -> tuple[int, list[tuple[int, float]]]:
    """The target's rank (1 to 3) and the top ``top`` (token, log-prob), likeliest first: rank r has p = 2^-r, so
    the probabilities sum below 1 as a model's do."""
    rank = 1 + target % 3
    others = (token for token in range(target + 1, target + top + 2))
    order = [target if r == rank else next(others) for r in range(1, top + 1)]
    return rank, [(token, -r * math.log(2)) for r, token in enumerate(order, 1)]


def prompt_logprobs(ids: list[int], top: int) -> list[dict[str, dict[str, Any]] | None]:
    entries: list[dict[str, dict[str, Any]] | None] = [None]
    for target in ids[1:]:
        rank, best = ranked(target, top)
        entry = {
            str(t): {"logprob": lp, "rank": r, "decoded_token": token_text(t)} for r, (t, lp) in enumerate(best, 1)
        }
        entry[str(target)] = {"logprob": -rank * math.log(2), "rank": rank, "decoded_token": token_text(target)}
        entries.append(entry)
    return entries


def echoed_logprobs(ids: list[int], top: int) -> dict[str, Any]:
    """OpenAI's echo: the prompt's tokens and their log-probs, then the one generated token's."""
    generated = START_ID + 2
    tokens, token_logprobs, tops = [], [], []
    for position, target in enumerate([*ids, generated]):
        tokens.append(token_text(target))
        rank, best = ranked(target, top)
        if position == 0:
            token_logprobs.append(None)
            tops.append(None)
            continue
        entry = {token_text(t): lp for t, lp in best}
        entry[token_text(target)] = -rank * math.log(2)
        token_logprobs.append(-rank * math.log(2))
        tops.append(entry)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": []}


def prompts_of(prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        return [tokenize(prompt)]
    if prompt and all(isinstance(token, int) for token in prompt):
        return [prompt]
    return [tokenize(p) if isinstance(p, str) else p for p in prompt]


def completions(request: dict[str, Any], options: dict[str, Any]) -> tuple[int, Any]:
    if request.get("prompt_logprobs") is not None and options["echo_only"]:
        return 400, {"error": {"message": "prompt_logprobs is not supported", "code": 400}}
    prompts, n = prompts_of(request["prompt"]), request.get("n", 1)
    choices = []
    for i, ids in enumerate(prompts):
        for k in range(n):
            choice = {"index": i * n + k, "text": f"sample {k}", "logprobs": None, "finish_reason": "length"}
            if request.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = prompt_logprobs(ids, request["prompt_logprobs"])
            if request.get("echo") and request.get("logprobs") is not None:
                choice["logprobs"] = echoed_logprobs(ids, request["logprobs"])
            choices.append(choice)
    answer = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 0,
        "model": options["model"],
        "choices": choices,
        "system_fingerprint": FINGERPRINT,
    }
    return 200, answer


def models(options: dict[str, Any]) -> dict[str, Any]:
    model = {
        "id": options["model"],
        "object": "model",
        "owned_by": "vllm",
        "root": options["root"] or f"/models/{options['model']}",
        "max_model_len": options["max_model_len"],
    }
    return {"object": "list", "data": [model]}


def _logprobs_set(value: Any) -> Callable[[dict[str, Any]], None]:
    """Sets every log-prob of a prompt token (the target's and, in echo, the top ones) to ``value``."""

    def spoil(choice: dict[str, Any]) -> None:
        for entry in choice.get("prompt_logprobs") or []:
            for option in (entry or {}).values():
                option["logprob"] = value
        echoed = choice.get("logprobs") or {}
        if echoed:
            echoed["token_logprobs"] = [None] + [value] * (len(echoed["token_logprobs"]) - 1)
            echoed["top_logprobs"] = [entry and dict.fromkeys(entry, value) for entry in echoed["top_logprobs"]]

    return spoil


def _ranks_as_strings(choice: dict[str, Any]) -> None:
    for entry in choice.get("prompt_logprobs") or []:
        for option in (entry or {}).values():
            option["rank"] = str(option["rank"])


def _tops_as_lists(choice: dict[str, Any]) -> None:
    echoed = choice.get("logprobs") or {}
    if echoed:
        echoed["top_logprobs"] = [entry and list(entry.items()) for entry in echoed["top_logprobs"]]


def _entries(spoil_entry: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def spoil(choice: dict[str, Any]) -> None:
        if choice.get("prompt_logprobs"):
            choice["prompt_logprobs"] = [entry and spoil_entry(entry) for entry in choice["prompt_logprobs"]]

    return spoil


_CHOICE_SPOILS: dict[str, Callable[[dict[str, Any]], None]] = {
    "logprob_string": _logprobs_set("abc"),
    "nan": _logprobs_set(math.nan),
    "inf": _logprobs_set(math.inf),
    "positive": _logprobs_set(0.5),
    "far_below": _logprobs_set(-1e300),
    "bare_float": _entries(lambda entry: 1.5),
    "bare_logprob": _entries(lambda entry: {token: option["logprob"] for token, option in entry.items()}),
    "rank_string": _ranks_as_strings,
    "top_logprobs_not_dict": _tops_as_lists,
    "sample_no_index": lambda choice: choice.pop("index"),
    "sample_text_not_string": lambda choice: choice.update(text=7),
}
_TOKENS = {
    "tokens_strings": str,
    "tokens_floats": float,
    "tokens_bools": lambda token: token > 1,
    "tokens_negative": lambda token: -token,
}


def spoiled(behaviour: str, path: str, status: int, answer: Any, request: dict[str, Any]) -> Any:
    """``answer`` as ``behaviour`` makes it."""
    if status != 200:
        return answer
    if path == "/v1/models":
        if behaviour == "models_list":
            return answer["data"]
        if behaviour == "models_data_not_list":
            answer["data"] = answer["data"][0]
        if behaviour == "max_model_len_string":
            answer["data"][0]["max_model_len"] = "2048"
    elif path == "/tokenize":
        if behaviour == "tokens_missing":
            del answer["tokens"]
        elif behaviour in _TOKENS:
            answer["tokens"] = [_TOKENS[behaviour](token) for token in answer["tokens"]]
    elif path == "/v1/completions":
        sampling = request.get("prompt_logprobs") is None and not request.get("echo")
        if behaviour == "completions_list":
            return answer["choices"]
        if behaviour == "choices_missing":
            del answer["choices"]
        if behaviour == "choices_not_list":
            answer["choices"] = {str(c["index"]): c for c in answer["choices"]}
        if behaviour in _CHOICE_SPOILS and sampling == behaviour.startswith("sample_"):
            for choice in answer["choices"]:
                _CHOICE_SPOILS[behaviour](choice)
    return answer


def with_key(value: Any, secret: str) -> Any:
    """``value`` with ``secret`` added to every string in it (the names of fields stay)."""
    if isinstance(value, str):
        return f"{value} {secret}"
    if isinstance(value, list):
        return [with_key(item, secret) for item in value]
    if isinstance(value, dict):
        return {key: with_key(item, secret) for key, item in value.items()}
    return value


def echoing_key(path: str, answer: Any, secret: str, options: dict[str, Any]) -> Any:
    """``answer`` with ``secret`` in every string but those it cannot hold and still mean the same: the served
    model's id (the client looks for it) and, in an echo, the tokens (they are also the keys of top_logprobs,
    which get it too)."""
    if path == "/v1/models":
        answer["data"].append({"id": "other-model", "object": "model", "owned_by": "another"})
    answer = {**with_key(answer, secret), "echoed": secret}
    if path == "/v1/models":
        answer["data"][0]["id"] = options["model"]
    for choice in answer.get("choices") or []:
        echoed = choice.get("logprobs") or {}
        if echoed.get("top_logprobs"):
            echoed["top_logprobs"] = [
                entry and {f"{token} {secret}": value for token, value in entry.items()}
                for entry in echoed["top_logprobs"]
            ]
    return answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up on a spoiled answer is the point, not news


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer({})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(json.loads(self.rfile.read(length) or b"{}"))

    def _answer(self, request: dict[str, Any]) -> None:
        behaviour, options = self.server.behaviour, self.server.options
        authorization = self.headers.get("Authorization") or ""
        secret = f"{authorization} {authorization.removeprefix('Bearer ')}" if authorization else ""
        asked = self.path.split("?")[0]
        path = next((route for route in ROUTES if asked.endswith(route)), asked)  # any base path before them
        if behaviour == "refuse_echo_key":
            status, answer = options["status"], {"error": {"message": f"no entry for {secret}", "code": 0}}
        elif path == "/v1/models":
            status, answer = 200, models(options)
        elif path == "/tokenize":
            tokens = tokenize(request.get("prompt", ""))
            answer = {"count": len(tokens), "max_model_len": options["max_model_len"], "tokens": tokens}
            status, answer = 200, {**answer, "token_strs": [token_text(token) for token in tokens]}
        elif path == "/v1/completions":
            status, answer = completions(request, options)
        else:
            status, answer = 404, {"error": {"message": f"no route {path}", "code": 404}}
        answer = spoiled(behaviour, path, status, answer, request)
        if behaviour == "echo_key" and secret:
            answer = echoing_key(path, answer, secret, options)
        data = json.dumps(answer).encode()
        if secret and options["escape_key"]:
            key = authorization.removeprefix("Bearer ")
            data = data.replace(key.encode(), "".join(f"\\u{ord(c):04x}" for c in key).encode())
        self._send(status, data)

    def _send(self, status: int, body: bytes) -> None:
        head = f"HTTP/1.0 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        data = head.encode() + body
        try:
            if self.server.behaviour != "slow_drip":
                self.wfile.write(data)
                return
            for i in range(len(data)):
                if self.server.stopping.wait(self.server.options["drip_s"] if i else 0):
                    return
                self.wfile.write(data[i : i + 1])
        except OSError:
            pass  # the client hung up

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(behaviour: str = "good", **options: Any) -> Iterator[str]:
    """A server behaving as ``behaviour`` says, on 127.0.0.1 in a daemon thread, for as long as the block runs;
    yields its base URL."""
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"no behaviour {behaviour!r}: one of {', '.join(BEHAVIOURS)}")
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"no option {', '.join(sorted(unknown))}: one of {', '.join(DEFAULTS)}")
    server = _Server(("127.0.0.1", 0), _Handler)
    server.behaviour, server.options, server.stopping = behaviour, {**DEFAULTS, **options}, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    import sys

    with serving(sys.argv[1] if len(sys.argv) > 1 else "good") as url:
        print(url, flush=True)
        while True:
            time.sleep(3600)
