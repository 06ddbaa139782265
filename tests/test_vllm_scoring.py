"""Scoring through a real vLLM server (the ``vllm_server`` fixture serves the built-in SmolLM2-135M in fp32 on
127.0.0.1, with an API key and a top log-probs limit of 10): the scores equal local fp32 scoring, the faults a
served model brings are one line each and lose nothing, and the key is written nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import benchmark_module
from helpers import digests, read_jsonl, refused, run_cli, wait_until, write_jsonl

from mia_fast import Detector
from mia_fast.engines.passes import SamplesReadout
from mia_fast.scoring.config import ComputeConfig, ModelConfig
from mia_fast.served.client import ServerConfig
from mia_fast.served.server import ECHO, ServerEngine

pytestmark = pytest.mark.vllm

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts
KEY_VARIABLE = "MIA_FAST_TEST_SERVER_KEY"
RTOL = 1e-4


@pytest.fixture(scope="module")
def served(vllm_server):
    """The fixture's server, its key in the environment variable the runs name."""
    os.environ[KEY_VARIABLE] = vllm_server.key
    return vllm_server


def server_args(server, *extra) -> list[str]:
    return ["--server", server.url, "--server-model", server.model, "--api-key-env", KEY_VARIABLE, *extra]


def server_config(server, **settings) -> ServerConfig:
    return ServerConfig(server.url, server.model, api_key_env=KEY_VARIABLE, tokenizer=server.model_dir, **settings)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    if (SHARED_DATA / "pile_test").is_dir():
        return pile_texts("wikipedia_en", n=50, max_words=100)
    return [f"text number {i}: " + "the quick brown fox jumps over the lazy dog " * (1 + i % 7) for i in range(50)]


@pytest.fixture(scope="module")
def data(tmp_path_factory, texts) -> Path:
    path = tmp_path_factory.mktemp("served") / "texts.jsonl"
    write_jsonl(path, [{"id": i, "text": t, "label": i % 2} for i, t in enumerate(texts)])
    return path


@pytest.fixture(scope="module")
def counts(tmp_path_factory, served) -> Path:
    path = tmp_path_factory.mktemp("freq") / "counts.npy"
    np.save(path, np.random.default_rng(0).integers(0, 1000, 49152))
    return path


METHODS = "loss,zlib,mink,dcpdd"


@pytest.fixture(scope="module")
def local_scores(tmp_path_factory, served, data, counts) -> list[dict]:
    out = tmp_path_factory.mktemp("local") / "scores.jsonl"
    args = ["--model", served.model_dir, "--dtype", "fp32", "--device", "cpu", "--freq-counts", counts]
    assert run_cli("score", data, *args, "--methods", METHODS, "--out", out, "--quiet") == 0
    return read_jsonl(out)


def assert_same_scores(got: list[dict], expected: list[dict], columns=None) -> None:
    assert len(got) == len(expected)
    columns = columns or [c for c in expected[0] if c not in ("id", "label", "warning")]
    for column in columns:
        a = np.array([row[column] for row in got], dtype=float)
        b = np.array([row[column] for row in expected], dtype=float)
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=0, err_msg=column)


def test_fp32_scores_through_the_server_equal_local_scoring(tmp_path, served, data, counts, local_scores):
    out = tmp_path / "served.jsonl"
    args = server_args(served, "--tokenizer", served.model_dir, "--freq-counts", counts)
    assert run_cli("score", data, *args, "--methods", METHODS, "--out", out, "--quiet") == 0
    got = read_jsonl(out)
    assert [r["n_tokens"] for r in got] == [r["n_tokens"] for r in local_scores]
    assert_same_scores(got, local_scores)
    assert len([c for c in got[0] if c.startswith("mink_")]) == 10
    engine = json.loads(Path(f"{out}.manifest.json").read_text())["engines"]["target"]
    assert engine["server_model"] == served.model and engine["server"].startswith("vllm-")


def test_echo_and_the_servers_own_tokenizer_give_the_same_log_probs(served, texts):
    detector = Detector(server_config(served))
    assert detector.target.protocol != ECHO
    by_prompt_logprobs = detector.score(texts[:8], ["loss", "mink"], [0.2])
    detector.target.protocol = ECHO
    by_echo = detector.score(texts[:8], ["loss", "mink"], [0.2])
    for column in by_prompt_logprobs:
        np.testing.assert_allclose(by_echo[column], by_prompt_logprobs[column], rtol=RTOL)
    # Where the server tokenizes (no tokenizer of the model here), its ids come back from it, without a start token.
    untokenized = Detector(ServerConfig(served.url, served.model, api_key_env=KEY_VARIABLE))
    untokenized.target.loaded = None
    untokenized.target.prepend_start = False
    local = Detector(ModelConfig(model=served.model_dir, dtype="fp32", device="cpu", prepend_start=False))
    np.testing.assert_allclose(
        untokenized.score(texts[:8], ["loss"])["loss"], local.score(texts[:8], ["loss"])["loss"], rtol=RTOL
    )


def test_without_tokenizer_served_scores_equal_local_scores(tmp_path, capsys, served, data, counts, local_scores):
    """No --tokenizer: the served model's own tokenizer is found here by the root vLLM reports, so the start token
    and the ids are a local run's and every score agrees."""
    out = tmp_path / "served.jsonl"
    args = server_args(served, "--freq-counts", counts)
    assert run_cli("score", data, *args, "--methods", METHODS, "--out", out, "--quiet") == 0
    err = capsys.readouterr().err
    assert "tokenizer: the served model's own, found here at" in err and "warning" not in err
    got = read_jsonl(out)
    assert [r["n_tokens"] for r in got] == [r["n_tokens"] for r in local_scores]
    assert_same_scores(got, local_scores)
    columns = [c for c in got[0] if c in ("loss", "zlib") or c.startswith("mink_")]
    assert len(columns) == 12
    engine = json.loads(Path(f"{out}.manifest.json").read_text())["engines"]["target"]
    assert engine["prepend_start"] is True and engine["tokenizer"] != "the server's"


def test_minkpp_estimate_through_the_server_equals_the_same_estimate_here(served, texts):
    served_scores = Detector(server_config(served)).score(texts[:10], ["minkpp_top10"], [0.2, 1.0])
    local = Detector(ModelConfig(model=served.model_dir, dtype="fp32", device="cpu"))
    local_scores = local.score(texts[:10], ["minkpp_top10"], [0.2, 1.0])
    for column in served_scores:
        np.testing.assert_allclose(served_scores[column], local_scores[column], rtol=1e-3, atol=1e-4)


def test_recall_prefix_through_the_server_scores_only_the_text(tmp_path, served, texts):
    data = tmp_path / "few.jsonl"
    write_jsonl(data, [{"text": t} for t in texts[:10]])
    prefix = tmp_path / "prefix.txt"
    prefix.write_text("".join(f"Known non-member number {i}, written for this test alone.\n" for i in range(3)))
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    common = ["--methods", "recall", "--prefix-nonmembers", prefix, "--quiet"]
    local_model = ["--model", served.model_dir, "--dtype", "fp32", "--device", "cpu"]
    assert run_cli("score", data, *local_model, *common, "--out", local) == 0
    assert run_cli("score", data, *server_args(served, "--tokenizer", served.model_dir), *common, "--out", remote) == 0
    assert_same_scores(read_jsonl(remote), read_jsonl(local), ["n_tokens", "recall"])


def test_a_stats_cache_rerun_with_other_methods_sends_no_request(tmp_path, served, texts, monkeypatch):
    compute = ComputeConfig(stats_cache=tmp_path / "cache")
    first = Detector(server_config(served), compute=compute)
    first.score(texts[:6], ["loss", "minkpp_top5"], [0.2])

    def no_request(*args, **kwargs):
        raise AssertionError("a request was sent")

    monkeypatch.setattr(ServerEngine, "_request_logprobs", no_request)
    again = Detector(server_config(served), compute=compute)
    scores = again.score(texts[:6], ["zlib", "mink", "minkpp_top5"], [0.5, 1.0])
    assert np.isfinite(scores["minkpp_top5_0.5"]).all()


def test_samples_are_drawn_by_the_server(served, texts):
    detector = Detector(server_config(served))
    samples = detector.target.run(SamplesReadout(3), texts[:4])
    assert samples.shape == (4, 3) and all(isinstance(s, str) and s for s in samples.ravel())
    assert np.isfinite(detector.score(texts[:4], ["samia"])["samia"]).all()


def one_line_within(seconds: float, capsys, *args, keep=()) -> str:
    start = time.monotonic()
    line = refused(capsys, *args, keep=keep)
    assert time.monotonic() - start < seconds, line
    return line


def test_a_wrong_key_is_one_line_and_never_shown(tmp_path, capsys, served, data, monkeypatch):
    monkeypatch.setenv("WRONG_KEY", "sk-wrong-key-0000")
    args = ["--server", served.url, "--server-model", served.model, "--api-key-env", "WRONG_KEY", "--methods", "loss"]
    line = one_line_within(10, capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path, data])
    assert "refused the key (HTTP 401" in line and "$WRONG_KEY" in line and "sk-wrong" not in line


def test_an_unknown_model_is_one_line_naming_what_is_served(tmp_path, capsys, served, data):
    args = [
        "--server",
        served.url,
        "--server-model",
        "no-such-model",
        "--api-key-env",
        KEY_VARIABLE,
        "--methods",
        "loss",
    ]
    line = one_line_within(10, capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path, data])
    assert f"serves {served.model}, not 'no-such-model'" in line


def test_more_top_log_probs_than_the_server_allows_is_one_line_with_the_fix(tmp_path, capsys, served, data):
    args = server_args(served, "--tokenizer", served.model_dir, "--methods", "minkpp_top20", "--quiet")
    line = one_line_within(10, capsys, "score", data, *args, "--out", tmp_path / "o.jsonl", keep=[tmp_path, data])
    assert "HTTP 400" in line and "--max-logprobs K" in line and "minkpp_top10" in line


def test_a_server_killed_and_restarted_mid_run_loses_nothing(tmp_path, served, data, local_scores):
    """The run retries while the server is down, and its rows equal an uninterrupted run's."""
    out = tmp_path / "restarted.jsonl"
    args = server_args(served, "--tokenizer", served.model_dir, "--methods", "loss,zlib,mink", "--block-rows", "5")
    command = [sys.executable, "-m", "mia_fast.cli", "score", str(data), *args, "--in-flight", "1", "--out", str(out)]
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, KEY_VARIABLE: served.key})
    stage = Path(f"{out}.partial/manifest.json")
    wait_until(lambda: stage.is_file() and json.loads(stage.read_text())["blocks"], "a block was written", run)
    served.kill()
    served.start()
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert "refuses connections" in err or "dropped the connection" in err, err  # it did meet the outage
    assert served.key not in err
    assert_same_scores(read_jsonl(out), local_scores, ["n_tokens", "loss", "zlib", "mink_0.1", "mink_1.0"])


def test_the_key_is_in_no_output_manifest_cache_report_or_log(tmp_path, capsys, served, data):
    report, cache = tmp_path / "report", tmp_path / "cache"
    args = server_args(served, "--tokenizer", served.model_dir, "--methods", "loss,mink", "--k", "0.2")
    capsys.readouterr()
    assert run_cli("score", data, *args, "--out", tmp_path / "s.jsonl", "--stats-cache", cache) == 0
    assert run_cli("eval", data, *args, "--report", report, "--bootstrap", "50") == 0
    logs = capsys.readouterr()
    written = [path for path in digests(tmp_path)]
    assert any(p.endswith(".manifest.json") for p in written) and any("cache" in p for p in written)
    key = served.key.encode()
    for path in written:
        assert key not in Path(path).read_bytes(), path
    assert served.key not in logs.out + logs.err
