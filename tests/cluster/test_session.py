"""Finding and reaching Ray: a missing Ray named with how to install it, a cluster address that is a file, malformed
or does not answer (given, or in RAY_ADDRESS) refused in one line within seconds, the variables set for Ray's start
only while it starts, and no line of Ray's own on stderr under --quiet."""

import os
import socket
import subprocess
import sys
import time

import pytest
from helpers import fail, write_jsonl

from mia_fast.cluster.session import (
    LEVEL_LINE,
    RayUnreachable,
    _stderr_without_level_line,
    _temporary_environment,
    check_address,
    cluster_address,
    require_ray,
)
from mia_fast.errors import MiaFastError


def test_addresses_that_need_no_answer_pass():
    for address in (None, "", "auto", "local"):
        check_address(address)


def test_an_address_that_is_a_file_or_malformed_is_refused(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    with pytest.raises(MiaFastError, match="but it is a file: write --ray=ADDRESS, or put --ray after the input"):
        check_address(str(data))
    with pytest.raises(MiaFastError, match="--ray head:port: expected host:port, ray://host:port or auto"):
        check_address("head:port")


def test_an_address_where_nothing_listens_is_refused_at_once():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    started = time.perf_counter()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(MiaFastError, match=f"cannot reach the Ray cluster at {address}: Connection refused"):
            check_address(address)
    assert time.perf_counter() - started < 5


def test_the_address_ray_address_names_is_checked_as_a_given_one(monkeypatch):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    with pytest.raises(RayUnreachable, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused"):
        cluster_address(None)
    assert cluster_address("auto") == "auto"
    monkeypatch.delenv("RAY_ADDRESS")
    assert cluster_address(None) is None


def test_the_level_line_of_rays_core_is_dropped_and_every_other_line_kept(capfd):
    with _stderr_without_level_line():
        os.write(2, b"[2026-12-05 21:40:42,163 I 7 7] logging.cc:303: " + LEVEL_LINE + b" to 3\n")
        os.write(2, b"[2026-12-05 21:40:43,000 E 7 7] core_worker.cc:1: an error\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "[2026-12-05 21:40:43,000 E 7 7] core_worker.cc:1: an error\nafter\n"


def test_a_ray_started_here_adds_no_line_to_stderr_under_quiet(tiny_model_dir, tmp_path):
    """In a process of its own, as a user runs it: one that used Ray's client before has gRPC running, whose fork
    handlers then log lines no user run prints."""
    pytest.importorskip("ray")
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": f"the quick brown fox {i}"} for i in range(8)])
    command = ["freq", "build", data, "--tokenizer", tiny_model_dir, "--out", tmp_path / "t.freq", "--quiet", "--ray"]
    ran = subprocess.run(
        [sys.executable, "-m", "mia_fast.cli", *map(str, command)], capture_output=True, text=True, timeout=600
    )
    lines = ran.stderr.splitlines()
    assert ran.returncode == 0 and len(lines) == 1 and lines[0].startswith("done in "), lines


def test_a_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MiaFastError, match=r"needs Ray, which is not installed here: pip install 'mia-fast\[ray\]'"):
        require_ray()


def test_variables_are_set_for_the_duration_only_where_the_user_has_not_set_them(monkeypatch):
    monkeypatch.setenv("MIA_FAST_TEST_SET", "mine")
    monkeypatch.delenv("MIA_FAST_TEST_UNSET", raising=False)
    with _temporary_environment(MIA_FAST_TEST_SET="ours", MIA_FAST_TEST_UNSET="ours"):
        assert (os.environ["MIA_FAST_TEST_SET"], os.environ["MIA_FAST_TEST_UNSET"]) == ("mine", "ours")
    assert os.environ["MIA_FAST_TEST_SET"] == "mine" and "MIA_FAST_TEST_UNSET" not in os.environ


def test_an_unreachable_cluster_fails_fast_naming_the_address(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    pytest.importorskip("ray")
    started = time.perf_counter()
    error = fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--out",
        tmp_path / "o.jsonl",
        "--ray",
        "127.0.0.1:1",
    )
    assert "cannot reach the Ray cluster at 127.0.0.1:1: Connection refused" in error
    assert time.perf_counter() - started < 10
    error = fail(capsys, "score", "--ray", labelled_jsonl, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl")
    assert "took" in error and "but it is a file: write --ray=ADDRESS, or put --ray after the input" in error
    assert not (tmp_path / "o.jsonl.shards").exists()


def test_without_ray_installed_the_error_says_how_to_install_it(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ray", None)
    install = "--ray needs Ray, which is not installed here: pip install 'mia-fast[ray]'"
    assert install in fail(
        capsys, "score", labelled_jsonl, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl", "--ray"
    )
    assert install in fail(
        capsys, "freq", "build", labelled_jsonl, "--tokenizer", tiny_model_dir, "--out", tmp_path / "t.freq", "--ray"
    )
