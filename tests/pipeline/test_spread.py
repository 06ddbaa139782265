"""A model spread over devices by a device map (pipeline.spread): its scores, token statistics, hidden states and top
log-probs those of the model loaded whole, its layers kept on the disk read in as they run, its weights known by the
same fingerprint; ``auto`` on a machine without a GPU the whole model on the CPU, packed as ever; the path naming where
its layers are, and packing refused; what it cannot give (gradients, samples, a fine-tuned copy) refused before it
loads; the reference model whole; the temporary offload folder gone with the model, with the process, or at the next
load after a killed one."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import texts_of
from helpers import ON_DISK, digests, offload_folders, own_cache_directory, read_jsonl

from mia_fast import DeviceMap, ModelConfig, load_model
from mia_fast.api import Detector, FsdSettings, ScoringConfig, check_before_loading
from mia_fast.engines.passes import HiddenStatesReadout, TopLogprobsReadout
from mia_fast.errors import MiaFastError
from mia_fast.pipeline import models
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.spread import spread_of

own_cache = pytest.fixture(autouse=True)(own_cache_directory)

STATS = ("logp", "mu", "var", "max_logp")


@pytest.fixture(scope="module")
def four_layers_bin(four_layers, tmp_path_factory) -> Path:
    """The same model as a pytorch_model.bin: the layers kept on the disk are written out to the offload folder."""
    directory = tmp_path_factory.mktemp("four-layers-bin")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((four_layers / name).read_bytes())
    whole = load_model(str(four_layers))
    torch.save(whole.model.state_dict(), directory / "pytorch_model.bin")
    return directory


def max_difference(a: dict, b: dict) -> float:
    return max(float(np.nanmax(np.abs(np.asarray(a[c]) - np.asarray(b[c])))) for c in a)


# ---- scores ----------------------------------------------------------------------------------------------------------


def test_scores_with_layers_on_the_disk_are_those_of_the_model_loaded_whole(four_layers, own_cache):
    texts = texts_of(12, seed=4, words=40)  # some longer than the window of 64: several rows each
    whole = Detector(ModelConfig(model=str(four_layers), device="cpu"))
    spread = Detector(ModelConfig(model=str(four_layers), device=DeviceMap(ON_DISK)))
    assert spread.target.loaded.spread is not None and not spread.target.packs and whole.target.packs
    assert max_difference(whole.score(texts).columns, spread.score(texts).columns) < 1e-5
    a, b = whole.token_stats(texts), spread.token_stats(texts)
    assert max_difference({c: getattr(a, c) for c in STATS}, {c: getattr(b, c) for c in STATS}) < 1e-5
    # The same model wherever its weights are: the stats cache and a resumed output know it by its weights.
    assert whole.provenance()["target"]["weights"] == spread.provenance()["target"]["weights"]
    assert offload_folders(own_cache) == []  # its weights stay in the model's own safetensors file


def test_hidden_states_and_top_log_probs_of_a_spread_model_are_the_whole_models(four_layers):
    texts = texts_of(5, seed=5, words=12)
    whole = StatsEngine(load_model(str(four_layers)))
    spread = StatsEngine(load_model(str(four_layers), device=DeviceMap(ON_DISK)))
    for readout in (HiddenStatesReadout((0, 3)), TopLogprobsReadout(5)):
        a, b = whole.run(readout, texts), spread.run(readout, texts)
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, atol=1e-5)
        else:
            np.testing.assert_allclose(a.logp, b.logp, atol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto spreads over the GPUs here")
def test_auto_without_a_gpu_loads_the_whole_model_on_the_cpu(four_layers, own_cache):
    loaded = load_model(str(four_layers), device=DeviceMap("auto"))
    assert loaded.spread is None and loaded.device == loaded.input_device == torch.device("cpu")
    assert loaded.dtype == torch.float32 and StatsEngine(loaded).packs  # whole on one device: packed as ever
    assert offload_folders(own_cache) == []


# ---- the path line, and what a spread model cannot do ----------------------------------------------------------------


def test_the_path_says_where_the_layers_are_and_packed_is_refused(four_layers):
    loaded = load_model(str(four_layers), device=DeviceMap(ON_DISK))
    assert spread_of(loaded.model).layers == "2 layers on cpu, 2 on disk"
    path = StatsEngine(loaded).path.describe()
    assert path.startswith("the model's own forward") and "spread over devices by --device-map: 2 layers on cpu" in path
    with pytest.raises(MiaFastError, match="cannot run this model packed: its layers are spread over devices"):
        StatsEngine(loaded, forward="packed")


@pytest.mark.parametrize(
    ("methods", "said"),
    [
        ("gradnorm", "the model's gradients, which a model spread over devices by --device-map does not give"),
        ("samia", "continuations sampled from the model, which a model spread over devices by --device-map"),
        ("fsd_loss", "a model spread by --device-map cannot be fine-tuned"),
    ],
)
def test_what_a_spread_model_cannot_give_is_refused_before_loading(four_layers, methods, said, monkeypatch):
    monkeypatch.setattr(models, "_load_pretrained", lambda *a: pytest.fail("a model was loaded"))
    config = ModelConfig(model=str(four_layers), device=DeviceMap(ON_DISK))
    with pytest.raises(MiaFastError, match=said):
        check_before_loading(config, ScoringConfig(methods=(methods,), settings=[FsdSettings(nonmembers=("a text",))]))


def test_the_reference_model_loads_whole_on_the_default_device(four_layers, tiny_reference_dir):
    config = ModelConfig(model=str(four_layers), ref_model=str(tiny_reference_dir), device=DeviceMap(ON_DISK))
    detector = Detector(config)
    assert detector.target.loaded.spread is not None and detector.reference.loaded.spread is None
    assert detector.reference.packs


# ---- the offload folder ----------------------------------------------------------------------------------------------


def test_the_offload_folder_lives_as_long_as_the_model(four_layers_bin, own_cache):
    loaded = load_model(str(four_layers_bin), device=DeviceMap(ON_DISK))
    (folder,) = offload_folders(own_cache)
    assert any(folder.iterdir())  # the layers kept on the disk, written out of the .bin checkpoint
    assert StatsEngine(loaded).compute(["a text to score"]).logp.size
    del loaded
    gc.collect()
    assert offload_folders(own_cache) == []


def test_the_offload_folder_is_gone_when_the_process_ends(four_layers_bin, labelled_jsonl, tmp_path, own_cache):
    before = digests(four_layers_bin, labelled_jsonl)
    environment = {**os.environ, "MIA_FAST_CACHE": str(own_cache), "HF_HUB_OFFLINE": "1"}
    script = (
        "import sys; from mia_fast import DeviceMap, load_model; from pathlib import Path; "
        f"kept = load_model(sys.argv[1], device=DeviceMap({ON_DISK!r})); "
        "assert any(p.iterdir() for p in Path(sys.argv[2], 'offload').iterdir())"
    )
    subprocess.run([sys.executable, "-c", script, str(four_layers_bin), str(own_cache)], env=environment, check=True)
    assert offload_folders(own_cache) == []
    command = [sys.executable, "-m", "mia_fast.cli", "score", str(labelled_jsonl), "--model", str(four_layers_bin)]
    command += ["--device-map", json.dumps(ON_DISK), "--out", str(tmp_path / "o.jsonl"), "--methods", "loss", "--quiet"]
    subprocess.run(command, env=environment, check=True, capture_output=True)
    assert offload_folders(own_cache) == [] and len(read_jsonl(tmp_path / "o.jsonl")) == 24
    assert digests(four_layers_bin, labelled_jsonl) == before


def test_a_folder_a_killed_process_left_is_removed_by_the_next_load(four_layers, own_cache):
    import socket

    left = own_cache / "offload" / f"{2**22 + 1}@{socket.gethostname()}@killed"  # past pid_max: never alive
    another_host = own_cache / "offload" / f"{2**22 + 1}@another-host@killed"
    for folder in (left, another_host):
        folder.mkdir(parents=True)
        (folder / "model.layers.2.mlp.up_proj.weight.safetensors").write_bytes(b"x")
    load_model(str(four_layers), device=DeviceMap(ON_DISK))
    assert not left.exists() and another_host.exists()  # a shared cache's other hosts are theirs to sweep
