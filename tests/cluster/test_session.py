"""Finding and reaching Ray: a missing Ray named with how to install it, a cluster address that is a file, malformed
or does not answer refused in one line within seconds, and the variables set for Ray's start only while it starts."""

import os
import socket
import sys
import time

import pytest
from helpers import fail

from mia_fast.cluster.session import _temporary_environment, check_address, require_ray
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
