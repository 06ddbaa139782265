"""A ``--ray`` run refused for its cluster, one where nothing listens or one that answers but is not Ray, leaves every
file as it was and adds none: no checkpoint folder of ``freq build``, no shards folder of ``score``."""

import json
import socket

import pytest
from helpers import refused, write_jsonl

from mia_fast.frequency.checkpoints import CHECKPOINTS_KIND

ray = pytest.importorskip("ray")


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.fixture
def quick_client(monkeypatch):
    """Ray's client gives up on a silent server after a second a try, not after 5, 10 and 20."""
    from ray.util.client import worker

    monkeypatch.setattr(worker, "INITIAL_TIMEOUT_SEC", 1)
    monkeypatch.setattr(worker, "MAX_TIMEOUT_SEC", 1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def commands(tmp_path, model_dir) -> dict[str, list]:
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": f"the quick brown fox {i}"} for i in range(8)])
    return {
        "freq build": ["freq", "build", data, "--tokenizer", model_dir, "--out", tmp_path / "t.freq", "--quiet"],
        "score": ["score", data, "--model", model_dir, "--out", tmp_path / "o.jsonl", "--methods", "loss", "--quiet"],
    }


def refused_leaving_nothing(capsys, tmp_path, command: list, address: str) -> str:
    paths = sorted(tmp_path.rglob("*"))
    line = refused(capsys, *command, "--ray", address, keep=[tmp_path])
    assert sorted(tmp_path.rglob("*")) == paths
    return line


@pytest.mark.parametrize("command", ["freq build", "score"])
def test_a_cluster_where_nothing_listens_leaves_nothing(command, tiny_model_dir, tmp_path, capsys):
    address = f"ray://127.0.0.1:{free_port()}"
    line = refused_leaving_nothing(capsys, tmp_path, commands(tmp_path, tiny_model_dir)[command], address)
    assert f"cannot reach the Ray cluster at {address}: Connection refused" in line


@pytest.mark.parametrize("command", ["freq build", "score"])
def test_a_cluster_that_answers_but_is_not_ray_leaves_nothing(
    command, silent_port, quick_client, tiny_model_dir, tmp_path, capsys
):
    address = f"ray://127.0.0.1:{silent_port}"
    line = refused_leaving_nothing(capsys, tmp_path, commands(tmp_path, tiny_model_dir)[command], address)
    assert f"cannot connect to the Ray cluster at {address}: ray client connection timeout" in line


def test_overwrite_keeps_the_checkpoints_of_a_build_whose_cluster_is_refused(tiny_model_dir, tmp_path, capsys):
    """--overwrite removes OUT.partial/ only once the run can go on: a cluster refused first leaves it as it was."""
    command = commands(tmp_path, tiny_model_dir)["freq build"]
    shard = tmp_path / "t.freq.partial" / "manifest.json"
    shard.parent.mkdir()
    shard.write_text(json.dumps({"format": CHECKPOINTS_KIND}))
    refused_leaving_nothing(capsys, tmp_path, [*command, "--overwrite"], f"ray://127.0.0.1:{free_port()}")
    assert json.loads(shard.read_text()) == {"format": CHECKPOINTS_KIND}
