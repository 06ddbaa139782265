"""The vllm_server fixture: a real vLLM server with the built-in model answers, and comes back after a restart."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

pytestmark = pytest.mark.vllm


def call(server, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    headers = {**server.headers, "Content-Type": "application/json"}
    request = urllib.request.Request(server.url + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def check_answers(server) -> None:
    models = call(server, "/v1/models")
    assert [entry["id"] for entry in models["data"]] == [server.model]
    reply = call(
        server,
        "/v1/completions",
        {"model": server.model, "prompt": [1, 2, 3, 4], "max_tokens": 1, "prompt_logprobs": 0},
    )
    logprobs = reply["choices"][0]["prompt_logprobs"]
    assert len(logprobs) == 4
    assert logprobs[0] is None
    # Each later entry maps the prompt's token id (a string key) to its log-prob.
    for token, entry in zip([2, 3, 4], logprobs[1:]):
        assert entry[str(token)]["logprob"] <= 0


def test_server_answers_and_restarts(vllm_server):
    check_answers(vllm_server)
    port, key = vllm_server.port, vllm_server.key
    start = time.perf_counter()
    vllm_server.restart()
    print(f"vLLM server restart: {time.perf_counter() - start:.1f} s")
    assert (vllm_server.port, vllm_server.key) == (port, key)
    check_answers(vllm_server)
