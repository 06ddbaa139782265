"""The probe: decoder-layer activations read through the engine, the per-layer logistic regressions,
training end to end on tiny models, the probe file, the ``probe`` method, its command, and bad input."""

import json

import numpy as np
import pytest
import torch
from conftest import texts_of, train_tokenizer
from helpers import fail, read_jsonl, run_cli, write_jsonl

from mia_fast import (
    ComputeConfig,
    Detector,
    OutputConfig,
    ProbeSettings,
    RunConfig,
    ScoringConfig,
    load_model,
    score_file,
)
from mia_fast.data import Dataset
from mia_fast.engines.passes import HiddenStatesReadout
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.probe_training import save_probe
from mia_fast.methods.probe import PROMPT, Probe, ProbePrompt
from mia_fast.pipeline.engine import StatsEngine

ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", "norm"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", "final_layer_norm"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "norm"),
}


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def architecture(request, tmp_path_factory):
    import transformers

    config_name, model_name, _ = ARCHITECTURES[request.param]
    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}, vocab_size=280)
    config = getattr(transformers, config_name)(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp(request.param)
    getattr(transformers, model_name)(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return request.param, load_model(str(directory), dtype="fp32")


# ---- activations ----


@pytest.mark.parametrize("batch_tokens", [1, 37, 100_000])
def test_activations_equal_a_per_text_forward_at_every_layer(architecture, batch_tokens):
    """Layer l's output is ``hidden_states[l + 1]`` of a one-text forward; the last layer's, before the
    final norm, gives ``hidden_states[-1]`` once the norm is applied."""
    name, loaded = architecture
    texts = [ProbePrompt()(t) for t in texts_of(7, seed=2)]
    engine = StatsEngine(loaded, batch_tokens=batch_tokens)
    got = engine.hidden_states(texts, HiddenStatesReadout())
    base = loaded.model.base_model
    final_norm = getattr(base, ARCHITECTURES[name][2])
    layers = loaded.model.config.num_hidden_layers
    assert got.shape == (7, layers, loaded.model.config.hidden_size)
    for i, text in enumerate(texts):
        ids = torch.tensor([engine.tokenize([text])[0]])
        with torch.inference_mode():
            states = base(ids, output_hidden_states=True).hidden_states
            for layer in range(layers - 1):
                np.testing.assert_allclose(got[i, layer], states[layer + 1][0, -1].numpy(), rtol=1e-5, atol=1e-5)
            normed = final_norm(torch.from_numpy(got[i, -1])[None]).numpy()[0]
        np.testing.assert_allclose(normed, states[-1][0, -1].numpy(), rtol=1e-5, atol=1e-5)


def test_a_readout_of_one_layer_equals_that_column_of_all_layers(architecture):
    _, loaded = architecture
    engine = StatsEngine(loaded)
    texts = texts_of(5, seed=3)
    every = engine.hidden_states(texts, HiddenStatesReadout())
    np.testing.assert_array_equal(engine.hidden_states(texts, HiddenStatesReadout((1,))), every[:, [1]])
    with pytest.raises(MiaFastError, match="out of range: the model has 3 decoder layers"):
        engine.hidden_states(texts, HiddenStatesReadout((3,)))


# ---- the logistic regressions ----


def test_probe_score_and_its_two_normalisations():
    rng = np.random.default_rng(2)
    acts = rng.normal(3.0, 2.0, size=(6, 4))
    weight = rng.normal(size=4).astype(np.float32)
    mean, std = np.full(4, 1.0, np.float32), np.full(4, 4.0, np.float32)
    split = Probe(weight, 0, "split", mean, std)
    own = (acts - acts.mean(0)) / acts.std(0, ddof=1)
    np.testing.assert_allclose(split.score(acts), 1 / (1 + np.exp(-own @ weight)), rtol=1e-6)
    np.testing.assert_allclose(
        split.with_normalization("train").score(acts), 1 / (1 + np.exp(-((acts - 1.0) / 4.0) @ weight)), rtol=1e-6
    )
    with pytest.raises(MiaFastError, match="needs at least 2"):
        split.score(acts[:1])
    with pytest.raises(MiaFastError, match="normalisation must be one of"):
        Probe(weight, 0, "batch", mean, std)
    assert ProbePrompt()("x{y}") == PROMPT.replace("[TEXT]", "x{y}")


# ---- training end to end, the file, the method ----


def test_the_probe_method_scores_from_the_chosen_layer(trained_probe, tmp_path):
    loaded, report = trained_probe
    save_probe(tmp_path / "p", report)
    texts = texts_of(6, seed=9)
    detector = Detector(loaded, [ProbeSettings(tmp_path / "p")])
    scores = detector.score(texts, methods=["loss", "probe"])["probe"]
    layer = report.probe.layer
    acts = StatsEngine(loaded).hidden_states([ProbePrompt()(t) for t in texts], HiddenStatesReadout((layer,)))[:, 0]
    np.testing.assert_allclose(scores, report.probe.score(acts), rtol=1e-6)
    assert ((scores > 0) & (scores < 1)).all()
    train_norm = Detector(loaded, [ProbeSettings(tmp_path / "p", normalization="train")]).score(
        texts[:1], methods=["probe"]
    )["probe"]
    np.testing.assert_allclose(train_norm, report.probe.with_normalization("train").score(acts[:1]), rtol=1e-6)


def test_a_probe_for_another_model_or_a_damaged_probe_is_refused(trained_probe, tiny_eos_only_model_dir, tmp_path):
    loaded, report = trained_probe
    save_probe(tmp_path / "p", report)
    with pytest.raises(MiaFastError, match="this probe was trained for"):
        Detector(str(tiny_eos_only_model_dir), [ProbeSettings(tmp_path / "p")])
    with pytest.raises(MiaFastError, match="no such probe directory"):
        Detector(loaded, [ProbeSettings(tmp_path / "missing")])
    truncated = tmp_path / "truncated"
    save_probe(truncated, report)
    data = (truncated / "probe.safetensors").read_bytes()
    (truncated / "probe.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(MiaFastError, match="probe.safetensors: checksum mismatch"):
        Probe.load(truncated)
    foreign = tmp_path / "foreign"
    save_probe(foreign, report)
    (foreign / "probe.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(MiaFastError, match="is not a mia-fast probe v2 file"):
        Probe.load(foreign)
    wide = Probe(
        np.zeros(64, np.float32), 0, "split", np.zeros(64, np.float32), np.ones(64, np.float32), report.probe.card
    )
    with pytest.raises(MiaFastError, match="hidden size 64"):
        Detector(loaded, [ProbeSettings(wide)])


def test_a_file_scored_with_split_normalisation_is_one_block(trained_probe, tmp_path):
    loaded, report = trained_probe
    save_probe(tmp_path / "p", report)
    texts = texts_of(9, seed=6)
    dataset = Dataset(texts, [f"t{i}" for i in range(9)], None)
    notes = []
    out = score_file(
        dataset,
        RunConfig(
            OutputConfig(tmp_path / "s.jsonl", block_rows=2),
            scoring=ScoringConfig(methods=["probe"]),
            compute=ComputeConfig(progress=False),
        ),
        detector=Detector(loaded, [ProbeSettings(tmp_path / "p")]),
        log=notes.append,
    )
    assert "scoring 9 rows in one block" in notes[0]
    expected = Detector(loaded, [ProbeSettings(tmp_path / "p")]).score(texts, methods=["probe"])["probe"]
    np.testing.assert_allclose([r["probe"] for r in read_jsonl(out)], expected, rtol=1e-6)


# ---- the commands ----


def test_probe_train_and_score_from_the_command_line(tiny_model_dir, tmp_path, capsys):
    texts = texts_of(20, seed=7)
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts[:12])])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts[12:])])
    out = tmp_path / "probe"
    args = [
        "probe",
        "train",
        "--train",
        train,
        "--dev",
        dev,
        "--model",
        tiny_model_dir,
        "--probe-epochs",
        "50",
        "--quiet",
    ]
    assert run_cli(*args, "--out", out) == 0
    printed = capsys.readouterr().out
    assert "<- kept" in printed and (out / "dev_auroc.png").stat().st_size > 5000
    assert not (out / "proxy").exists()
    assert "is not empty; pass --overwrite" in fail(capsys, *args, "--out", out)

    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts_of(10, seed=8))])
    assert (
        run_cli(
            "eval",
            data,
            "--model",
            tiny_model_dir,
            "--methods",
            "loss,probe",
            "--probe",
            out,
            "--report",
            tmp_path / "r",
            "--bootstrap",
            "20",
            "--quiet",
        )
        == 0
    )
    assert "probe" in json.loads((tmp_path / "r" / "metrics.json").read_text())["methods"]
    assert "needs a trained probe (--probe PROBE_DIR" in fail(
        capsys, "score", data, "--model", tiny_model_dir, "--methods", "probe", "--out", tmp_path / "s.jsonl"
    )
    one_class = write_jsonl(tmp_path / "one.jsonl", [{"text": t, "label": 1} for t in texts[:8]])
    assert "needs at least 4 of each class" in fail(capsys, *args[:3], one_class, *args[4:], "--out", tmp_path / "p2")
    assert "dev set has" in fail(capsys, *args[:5], one_class, *args[6:], "--out", tmp_path / "p3")


def test_scoring_with_the_probe_alone_runs_only_its_shortened_forward(trained_probe, tmp_path):
    loaded, report = trained_probe
    texts = texts_of(5, seed=11) + [""]
    detector = Detector(loaded, [ProbeSettings(report.probe)])
    layers_run = []
    handles = [
        layer.register_forward_hook(lambda *_, i=i: layers_run.append(i))
        for i, layer in enumerate(loaded.decoder_layers())
    ]
    try:
        probe_only = detector.score(texts, methods=["probe"])
    finally:
        for handle in handles:
            handle.remove()
    assert set(layers_run) == set(range(report.probe.layer + 1))  # no plain pass, and no layer past the probe's
    with_loss = detector.score(texts, methods=["loss", "probe"])
    np.testing.assert_array_equal(probe_only.n_tokens, with_loss.n_tokens)
    assert (
        probe_only.warnings == with_loss.warnings and probe_only.warnings[-1] is not None
    )  # "" is unscorable, for every method
    assert np.isnan(probe_only["probe"][-1])
    np.testing.assert_allclose(probe_only["probe"][:-1], with_loss["probe"][:-1], rtol=1e-6)
