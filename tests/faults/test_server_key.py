"""The API key never leaves the Authorization header: a server that copies the header (and the bare key) into every
string it answers, or quotes it in a refusal, leaves it in no line printed and no file written; nor is it shown
from a --server URL that holds it in its query, user or path."""

import json
import urllib.request
from pathlib import Path

import pytest
from helpers import digests, refused, run_cli, script, write_jsonl

KEY = "sk-faulty-5f3c9a0e1d2b4c6a"
VARIABLE = "MIA_FAST_TEST_FAULTY_KEY"
MASKED = "Bearer *** ***"  # the header the server echoes, then the bare key


faulty_server = script("faulty_server")


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(VARIABLE, KEY)


@pytest.fixture
def data(tmp_path):
    rows = [{"text": f"text {i}: " + "the rain in spain " * (1 + i % 3), "label": i % 2} for i in range(8)]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def server_args(url: str, *extra) -> list:
    return ["--server", url, "--server-model", "tiny", "--api-key-env", VARIABLE, "--server-retry", "0", *extra]


def files_holding_the_key(tmp_path) -> list[str]:
    return [path for path in digests(tmp_path) if KEY.encode() in Path(path).read_bytes()]


@pytest.mark.parametrize("escape_key", [False, True])
def test_the_echoing_server_does_echo_the_key(escape_key):
    """Without this, the tests below could pass because nothing was echoed."""
    with faulty_server.serving("echo_key", escape_key=escape_key) as url:
        for path, body in [("/v1/models", None), ("/v1/completions", b'{"prompt": "hi", "prompt_logprobs": 1}')]:
            request = urllib.request.Request(url + path, body, {"Authorization": f"Bearer {KEY}"})
            answer = urllib.request.urlopen(request).read()
            assert (KEY.encode() in answer) != escape_key
            assert json.dumps(json.loads(answer)).count(f"Bearer {KEY} {KEY}") >= 3, answer


@pytest.mark.parametrize(
    ("options", "extra"),
    [
        ({}, []),
        ({}, ["TOKENIZER"]),
        ({"echo_only": True}, ["TOKENIZER", "--methods", "loss,zlib,minkpp_top5"]),
        ({"escape_key": True}, []),
    ],
    ids=["server-tokenizer", "prompt-logprobs", "echo", "key-escaped"],
)
def test_an_echoing_server_leaves_the_key_in_no_line_and_no_file(
    options, extra, tmp_path, capsys, data, tiny_model_dir
):
    extra = [f"--tokenizer={tiny_model_dir}" if arg == "TOKENIZER" else arg for arg in extra]
    methods = [] if "--methods" in extra else ["--methods", "loss,zlib"]
    cache, out, report = tmp_path / "cache", tmp_path / "scores.jsonl", tmp_path / "report"
    capsys.readouterr()
    with faulty_server.serving("echo_key", **options) as url:
        args = server_args(url, *extra, *methods)
        assert run_cli("score", data, *args, "--stats-cache", cache, "--out", out) == 0
        assert run_cli("eval", data, *args, "--report", report, "--bootstrap", "20", "--no-blind") == 0
    printed = capsys.readouterr()
    assert KEY not in printed.out + printed.err
    assert not files_holding_the_key(tmp_path)
    # The server's fingerprint is recorded, the key in it hidden.
    manifest = Path(f"{out}.manifest.json").read_text()
    assert f"{faulty_server.FINGERPRINT} {MASKED}" in manifest, manifest
    # The run files name the key's variable, never the key.
    for run_file in (Path(f"{out}.run.toml"), report / "run.toml"):
        assert f'api_key_env = "{VARIABLE}"' in run_file.read_text()


def test_a_key_in_the_server_url_is_hidden_in_the_run_file(tmp_path, capsys, data):
    url = f"http://127.0.0.1:8000/{KEY}/v1"
    assert run_cli("score", data, *server_args(url), "--out", tmp_path / "o.jsonl", "--print-config") == 0
    text = capsys.readouterr().out
    assert KEY not in text and 'server = "http://127.0.0.1:8000/***/v1"' in text and "written as ***" in text


def test_the_models_a_server_lists_are_shown_without_the_key(tmp_path, capsys, data):
    with faulty_server.serving("echo_key") as url:
        args = [*server_args(url), "--server-model", "other", "--methods", "loss"]
        line = refused(capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path])
    assert f"serves tiny, other-model {MASKED}, not 'other'" in line and KEY not in line, line


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, "refused the key (HTTP 401: no entry for"),
        (404, "has no model 'tiny' or no /v1/models (HTTP 404: no entry for"),
        (400, "refused the request (HTTP 400: no entry for"),
        (503, "answered HTTP 503 (no entry for"),
    ],
)
def test_a_refusal_that_quotes_the_key_is_shown_without_it(status, expected, tmp_path, capsys, data):
    with faulty_server.serving("refuse_echo_key", status=status) as url:
        line = refused(
            capsys,
            "score",
            data,
            *server_args(url, "--methods", "loss"),
            "--out",
            tmp_path / "o.jsonl",
            keep=[tmp_path],
        )
    assert f"{expected} {MASKED})" in line and KEY not in line, line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"http://127.0.0.1:8000/?api_key={KEY}", "'http://127.0.0.1:8000/?api_key=***': give the server's base URL"),
        (f"http://127.0.0.1:8000/v1#{KEY}", "'http://127.0.0.1:8000/v1#***': give the server's base URL"),
        (f"ftp://127.0.0.1/models?key={KEY}", "'ftp://127.0.0.1/models?key=***': the scheme is 'ftp'"),
        (f"127.0.0.1:8000/v1?key={KEY}", "'127.0.0.1:8000/v1?key=***': no scheme"),
        (f"http://user:{KEY}@127.0.0.1:8000/", "'http://***@127.0.0.1:8000/': must not hold a user or password"),
        (f"http://127.0.0.1:99999999/{KEY}/v1", "'http://127.0.0.1:99999999/***/v1': the port is '99999999'"),
    ],
)
def test_a_refused_url_is_shown_without_the_key(url, expected, tmp_path, capsys, data):
    args = ["--server", url, "--server-model", "tiny", "--api-key-env", VARIABLE, "--methods", "loss"]
    line = refused(capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path])
    assert expected in line and KEY not in line, line
