"""A device map as given (``--device-map``; pipeline.device_map): a planner, a JSON object, a JSON file or a mapping,
and every malformed one refused in one line; through the command line, every default score column of a model spread
over the CPU and the disk that of the model loaded whole, the path line naming the map, the user's files untouched; a
bad map, and a map beside what it cannot go with (--device, --forward packed, --ray, --server), refused in one line
before a weight loads, nothing written. Loading and running a spread model: tests/pipeline/test_spread.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    FAST,
    ON_DISK,
    digests,
    fail,
    offload_folders,
    own_cache_directory,
    read_jsonl,
    refused,
    run_cli,
    write_jsonl,
)

from mia_fast import DeviceMap, ModelConfig
from mia_fast.api import ScoringConfig, check_before_loading
from mia_fast.errors import MiaFastError
from mia_fast.pipeline import models
from mia_fast.served.client import ServerConfig

own_cache = pytest.fixture(autouse=True)(own_cache_directory)


# ---- the value: a map as given ---------------------------------------------------------------------------------------


def test_a_map_is_a_planner_a_json_object_a_json_file_or_a_mapping(tmp_path):
    assert DeviceMap("auto").planner == "auto" and DeviceMap(" sequential ").planner == "sequential"
    assert DeviceMap('{"model": "cpu", "lm_head": 0}').modules() == {"model": "cpu", "lm_head": 0}
    (tmp_path / "map.json").write_text(json.dumps(ON_DISK))
    assert DeviceMap(tmp_path / "map.json").modules() == ON_DISK == DeviceMap(str(tmp_path / "map.json")).modules()
    assert DeviceMap({"": torch.device("cpu")}).modules() == {"": "cpu"}
    assert DeviceMap(ON_DISK).planner is None and str(DeviceMap("auto")) == "auto"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("{bad", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ("[1, 2]", "a JSON object of module names to devices, not an array"),
        ("{}", "the map is empty"),
        ('{"model": true}', "module 'model' goes to True, not a device"),
        ('{"model": -1}', "module 'model' goes to -1, not a device"),
        ("no-such.json", "(no such file)"),
        ("cpu", "to put the whole model on one device, use --device"),
    ],
)
def test_a_malformed_map_is_refused_in_one_line(given, said):
    with pytest.raises(MiaFastError) as refusal:
        DeviceMap(given).modules()
    assert said in str(refusal.value) and "\n" not in str(refusal.value)


def test_a_map_file_that_is_not_json_is_refused_in_one_line(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"text": "a"}, {"text": "b"}])
    with pytest.raises(MiaFastError, match="not valid JSON"):
        DeviceMap(path).modules()


# ---- scores and the path line, through the command line --------------------------------------------------------------


def test_the_cli_scores_every_default_column_as_the_whole_model_and_leaves_the_users_files(
    four_layers, labelled_jsonl, tmp_path, capsys
):
    map_file = tmp_path / "maps" / "on-disk.json"
    map_file.parent.mkdir()
    map_file.write_text(json.dumps(ON_DISK))
    before = digests(four_layers, labelled_jsonl, map_file.parent)
    whole, spread = tmp_path / "out" / "whole.jsonl", tmp_path / "out" / "spread.jsonl"
    assert run_cli("score", labelled_jsonl, "--model", four_layers, "--out", whole, "--quiet") == 0
    capsys.readouterr()
    command = ["score", labelled_jsonl, "--model", four_layers, "--device-map", map_file, "--out", spread]
    assert run_cli(*command, "--quiet", "--verbose") == 0
    said = "its layers are spread over devices by --device-map: 2 layers on cpu, 2 on disk; ids in on cpu, head on cpu"
    assert said in capsys.readouterr().err
    manifest = json.loads(Path(f"{spread}.manifest.json").read_text())
    assert said in manifest["engines"]["target"]["forward"]
    rows_whole, rows_spread = read_jsonl(whole), read_jsonl(spread)
    columns = [c for c, v in rows_whole[0].items() if isinstance(v, float)]
    assert {"loss", "zlib", "mink_0.1", "minkpp_1.0"} <= set(columns)
    for a, b in zip(rows_whole, rows_spread):
        np.testing.assert_allclose([a[c] for c in columns], [b[c] for c in columns], rtol=0, atol=1e-5)
    assert digests(four_layers, labelled_jsonl, map_file.parent) == before
    assert "device_map" in Path(f"{spread}.run.toml").read_text()


# ---- bad maps, and a map beside what it cannot go with: one line, before loading, nothing changed --------------------


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--device-map", "{bad"], "not valid JSON"),
        (["--device-map", '{"model.layers.9": "cpu", "": "cpu"}'], "has no module 'model.layers.9'; did you mean"),
        (["--device-map", '{"model.layer.0": "cpu", "": "cpu"}'], "has no module 'model.layer.0'; did you mean"),
        (["--device-map", '{"model.embed_tokens": "gpu", "": "cpu"}'], "goes to 'gpu', not a device"),
        (["--device-map", '{"model.embed_tokens": "cpu"}'], "gives no device to 38 weight(s)"),
        (["--device-map", "missing.json"], "(no such file)"),
        (["--device-map", "auto", "--device", "cpu"], "give --device (the whole model on one device) or --device-map"),
        (["--device-map", "auto", "--forward", "packed"], "--forward packed runs a model whole on one device"),
    ],
)
def test_a_bad_map_is_refused_in_one_line_before_loading(
    flags, said, four_layers, labelled_jsonl, tmp_path, capsys, monkeypatch, own_cache
):
    monkeypatch.setattr(models, "_load_pretrained", lambda *a: pytest.fail("a model was loaded"))
    out = tmp_path / "out" / "o.jsonl"
    line = refused(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        four_layers,
        "--out",
        out,
        *flags,
        keep=[four_layers, labelled_jsonl],
    )
    assert said in line
    assert not out.parent.exists() or not any(out.parent.iterdir())
    assert offload_folders(own_cache) == []


def test_ray_takes_no_map(four_layers, labelled_jsonl, tmp_path, capsys):
    pytest.importorskip("ray")
    flags = ["--device-map", "auto", "--ray"]
    line = refused(capsys, "score", labelled_jsonl, "--model", four_layers, "--out", tmp_path / "o.jsonl", *flags)
    assert "--device-map spreads one model over this machine's devices, and --ray gives each actor one GPU" in line


def test_a_device_the_machine_lacks_is_refused_in_one_line(four_layers, labelled_jsonl, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    flags = ["--device-map", '{"": "cuda:0"}']
    line = refused(capsys, "score", labelled_jsonl, "--model", four_layers, "--out", tmp_path / "o.jsonl", *flags)
    assert "module '': device 'cuda:0' was asked for but CUDA is not available" in line


def test_a_served_model_takes_no_map(labelled_jsonl, tmp_path, capsys):
    flags = ["--server", "http://127.0.0.1:9", "--server-model", "m", "--device-map", "auto"]
    line = refused(capsys, "score", labelled_jsonl, "--out", tmp_path / "o.jsonl", *flags, *FAST)
    assert "a served model's are the server's" in line
    served = ModelConfig(ServerConfig("http://127.0.0.1:9", "m"), device=DeviceMap("auto"))
    with pytest.raises(MiaFastError, match="a served model's are the server's"):
        check_before_loading(served, ScoringConfig(methods=("loss",)))


def test_the_commands_that_fine_tune_the_model_take_no_device_map(capsys):
    for command in (["demo"], ["probe", "train", "--train", "t.jsonl", "--dev", "d.jsonl", "--out", "p"]):
        assert "unrecognized arguments: --device-map auto" in fail(capsys, *command, "--device-map", "auto")
