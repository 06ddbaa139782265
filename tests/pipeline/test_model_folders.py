"""What a model folder holds (pipeline.model_folders): a peft LoRA adapter, alone (its base from its config) or beside
the weights it applies to, merged into them, so that both forwards score the adapted model as the merged model saved
whole, its weights fingerprint and provenance its own, the weights beside it checked as any checkpoint; refused in one
line without peft, without its base, not fitting it, lacking a tensor, beside a device map, or applied unmerged by
transformers; and a stale single weights file beside sharded weights named as the one that loads, as transformers
chooses."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FAST, digests, read_jsonl, run_cli, write_jsonl
from safetensors.torch import load_file, save_file

from mia_fast import load_model
from mia_fast.api import Detector, ModelConfig
from mia_fast.data.outputs import manifest_path
from mia_fast.errors import MiaFastError
from mia_fast.pipeline import models
from mia_fast.pipeline.model_folders import check_no_adapter_applied
from mia_fast.pipeline.models import check_model_source, load_tokenizer

pytestmark = pytest.mark.lower_bounds

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "Numbers 0123456789 and Punctuation: commas, dots. question? yes!",
    "the rain in spain stays mainly in the plain " * 3,
    "hello world",
]


@pytest.fixture(scope="module")
def lora(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """The tiny Llama (``base``), a LoRA adapter on it with random B matrices (peft starts them at zero: the adapter
    would change nothing), saved alone (``adapter``) and beside a copy of the base (``beside``), and the model with
    the adapter merged, saved whole (``merged``)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("lora")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    adapted = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    torch.manual_seed(3)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.2)
    adapted.save_pretrained(root / "adapter")
    adapted.merge_and_unload().save_pretrained(root / "merged")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(root / "merged")
    beside = shutil.copytree(tiny_model_dir, root / "beside")
    for path in (root / "adapter").glob("adapter_*"):
        shutil.copy(path, beside / path.name)
    return {"base": tiny_model_dir, "adapter": root / "adapter", "merged": root / "merged", "beside": beside}


def scores(model: Path, forward: str) -> dict[str, np.ndarray]:
    detector = Detector(ModelConfig(str(model), device="cpu", dtype="fp32", forward=forward))
    assert detector.target.packs == (forward == "packed")
    return {name: np.asarray(column, dtype=np.float64) for name, column in detector.score(TEXTS).columns.items()}


def max_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[name] - b[name]))) for name in a)


@pytest.mark.filterwarnings("ignore::mia_fast.errors.MiaFastWarning")
@pytest.mark.parametrize("forward", ["packed", "model"])
def test_an_adapter_scores_as_the_merged_model_saved_whole_on_both_forwards(lora, forward):
    merged = scores(lora["merged"], forward)
    assert max_difference(scores(lora["adapter"], forward), merged) <= 1e-5
    assert max_difference(scores(lora["beside"], forward), merged) <= 1e-5
    assert max_difference(scores(lora["base"], forward), merged) > 1e-2  # the adapter changes the scores


def test_an_adapters_weights_are_merged_fingerprinted_and_recorded(lora):
    adapted, base = load_model(str(lora["adapter"])), load_model(str(lora["base"]))
    assert not any("lora" in name for name, _ in adapted.model.named_parameters())  # merged: plain layers only
    record = adapted.adapter
    assert record["base"] == str(lora["base"]) and len(record["sha256"]) == 64
    fingerprints = {
        adapted.weights_fingerprint(),
        base.weights_fingerprint(),
        load_model(str(lora["merged"])).weights_fingerprint(),
    }
    assert len(fingerprints) == 3 and base.adapter is None
    detector = Detector(ModelConfig(str(lora["adapter"]), device="cpu"))
    assert detector.provenance()["target"]["adapter"] == record


def test_an_adapter_beside_the_weights_is_applied_with_one_line(lora, tmp_path, capsys):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    beside, merged = tmp_path / "beside.jsonl", tmp_path / "merged.jsonl"
    assert run_cli("score", data, "--model", lora["beside"], "--out", beside, *FAST) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mia-fast:")]
    assert len(lines) == 1 and lines[0].startswith("mia-fast: warning: ")
    assert "holds an adapter (adapter_config.json) beside its weights: it is merged into them" in lines[0]
    assert run_cli("score", data, "--model", lora["merged"], "--out", merged, *FAST) == 0
    for ours, whole in zip(read_jsonl(beside), read_jsonl(merged)):
        np.testing.assert_allclose(ours["loss"], whole["loss"], rtol=1e-5)
    manifest = json.loads(manifest_path(beside).read_text())
    assert manifest["engines"]["target"]["adapter"]["base"] == "the weights beside it"


def test_weights_beside_an_adapter_are_checked_as_any_checkpoint(lora, tmp_path):
    beside = shutil.copytree(lora["beside"], tmp_path / "beside")
    weights = load_file(beside / "model.safetensors")
    del weights["model.norm.weight"]
    save_file(weights, beside / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MiaFastError, match=r"1 weights it needs are not in the checkpoint \(model.norm.weight\)"):
        load_model(str(beside))


def test_without_peft_an_adapter_is_refused_in_one_line_saying_how_to_install(lora, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now fails, as where it is not installed
    for folder in ("adapter", "beside"):
        with pytest.raises(MiaFastError, match=r"holds a peft adapter \(adapter_config.json\); loading it needs "):
            check_model_source(str(lora[folder]))
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    before = digests(tmp_path)
    assert run_cli("score", data, "--model", lora["beside"], "--out", tmp_path / "o.jsonl", *FAST) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mia-fast: error: ") and line.endswith(
        "needs the package peft: pip install 'mia-fast[adapters]'"
    )
    assert digests(tmp_path) == before


def test_an_adapter_whose_base_is_missing_is_refused_naming_the_base(lora, tmp_path):
    adapter = shutil.copytree(lora["adapter"], tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(MiaFastError) as refused:
        check_model_source(str(adapter))
    assert str(refused.value) == (
        f"{adapter} is an adapter of {tmp_path / 'gone'} (base_model_name_or_path in adapter_config.json), which does "
        f"not load: {tmp_path / 'gone'}: no such model directory"
    )


def test_an_adapter_that_does_not_fit_its_base_is_refused(lora, tmp_path):
    adapter = shutil.copytree(lora["adapter"], tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["target_modules"] = ["no_such_proj"]
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(MiaFastError, match="the adapter cannot be merged into its base model: "):
        load_model(str(adapter))


def test_an_adapter_whose_file_lacks_a_tensor_is_refused_naming_it(lora, tmp_path):
    adapter = shutil.copytree(lora["adapter"], tmp_path / "adapter")
    tensors = load_file(adapter / "adapter_model.safetensors")
    lacking = sorted(tensors)[0]
    del tensors[lacking]
    save_file(tensors, adapter / "adapter_model.safetensors", metadata={"format": "pt"})
    with pytest.raises(MiaFastError, match="the adapter's weights file lacks tensors its config needs") as refused:
        load_model(str(adapter))
    assert lacking.rpartition(".")[0] in str(refused.value)


def test_an_adapter_is_refused_beside_a_device_map_before_anything_loads(lora, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(models, "_load_pretrained", lambda *a: pytest.fail("a model was loaded"))
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    for folder in ("adapter", "beside"):
        command = ["score", data, "--model", lora[folder], "--out", tmp_path / "o.jsonl", "--device-map", "auto"]
        assert run_cli(*command) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == (
            f"mia-fast: error: --device-map: {lora[folder]} holds a peft adapter, merged into a model loaded whole: "
            "use --device, or save the merged model whole (merge_and_unload().save_pretrained) and spread that"
        )
    assert not (tmp_path / "o.jsonl").exists()


def test_an_adapter_with_a_tokenizer_of_its_own_is_read_with_it(lora, tmp_path):
    adapter = shutil.copytree(lora["adapter"], tmp_path / "adapter")
    tokenizer = load_tokenizer(str(lora["base"]))
    tokenizer.model_max_length = 7
    tokenizer.save_pretrained(adapter)
    assert load_tokenizer(str(adapter)).model_max_length == 7
    assert load_tokenizer(str(lora["adapter"])).model_max_length != 7  # none of its own: its base's


def test_a_model_transformers_loaded_with_an_adapter_of_its_own_accord_is_refused(lora):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(lora["base"])
    check_no_adapter_applied(model, "user/base")
    model.load_adapter(str(lora["adapter"]))  # as from_pretrained does with a hub name of an adapter
    with pytest.raises(
        MiaFastError, match=r"^user/lora is a peft adapter on the hub: download it \(hf download user/lora "
    ):
        check_no_adapter_applied(model, "user/lora")


def test_a_stale_single_file_beside_sharded_weights_is_named_as_the_one_that_loads(lora, tmp_path, capsys):
    folder = shutil.copytree(lora["base"], tmp_path / "model")
    load_model(str(lora["merged"])).model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    shards = sorted((tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1
    for path in [*shards, tmp_path / "sharded" / "model.safetensors.index.json"]:
        shutil.copy(path, folder / path.name)
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in TEXTS])
    ours, single = tmp_path / "ours.jsonl", tmp_path / "single.jsonl"
    assert run_cli("score", data, "--model", folder, "--out", ours, *FAST) == 0
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mia-fast:")]
    assert line == (
        f"mia-fast: warning: {folder} holds both model.safetensors and sharded weights (model.safetensors.index.json); "
        "model.safetensors loads, as transformers chooses: remove the stale one"
    )
    assert run_cli("score", data, "--model", lora["base"], "--out", single, *FAST) == 0
    assert read_jsonl(ours) == read_jsonl(single)  # the single file's scores, as transformers loads it
