"""Training the probe (mia_fast.evaluation.probe_training): the proxy, each layer's logistic regression, the dev
layer, the probe file, the command."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import texts_of
from helpers import run_cli, write_jsonl

from mia_fast import (
    load_model,
)
from mia_fast.data import Dataset
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.probe_training import ProbeTraining, fit_probes, save_probe, train_probe
from mia_fast.generation.finetune import TrainingDiverged
from mia_fast.methods.probe import Probe, standardise


def separable(seed: int, layers: int = 3, n: int = 40, hidden: int = 16):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    features = rng.normal(size=(layers, n, hidden))
    features[:, :, 0] += 2.0 * (labels - 0.5) * np.arange(layers)[:, None]  # layer 0 knows nothing, layer 2 most
    return standardise(features), labels


def test_probe_training_loss_decreases_and_is_deterministic_for_a_seed():
    features, labels = separable(0)
    settings = ProbeTraining(probe_epochs=200, seed=3)
    weights, losses = fit_probes(features, labels, settings)
    assert losses.shape == (200, 3) and (losses[-1] < losses[0]).all()
    assert losses[-1, 2] < losses[-1, 0]  # the informative layer fits better
    again, _ = fit_probes(features, labels, settings)
    np.testing.assert_array_equal(weights, again)
    other, _ = fit_probes(features, labels, ProbeTraining(probe_epochs=200, seed=4))
    assert not np.allclose(weights, other)


def test_fitting_all_layers_at_once_equals_fitting_each_alone():
    features, labels = separable(1)
    settings = ProbeTraining(probe_epochs=100, seed=5)
    together, _ = fit_probes(features, labels, settings)
    for layer in range(3):
        # Layer l alone, with the initialisation it gets at position l.
        alone, _ = fit_probes(np.stack([features[layer]] * (layer + 1)), labels, settings)
        np.testing.assert_allclose(together[layer], alone[layer], rtol=1e-5, atol=1e-6)


def test_training_picks_the_best_dev_layer_and_writes_a_probe(trained_probe, tmp_path):
    loaded, report = trained_probe
    probe = report.probe
    assert probe.layer == int(np.argmax(report.dev_auroc["split"]))
    assert len(report.dev_auroc["split"]) == len(report.dev_auroc["train"]) == loaded.model.config.num_hidden_layers
    assert len(report.proxy_losses) == 2  # every member in one step, 2 epochs: 2 steps, as in the paper
    assert report.probe_losses[-1] < report.probe_losses[0]
    assert probe.card["model"]["weights_fingerprint"] == loaded.weights_fingerprint()
    # Every layer's probe is kept beside the one picked (the powered run reads each layer's on the evaluated set).
    assert report.layer_weights.shape == (loaded.model.config.num_hidden_layers, loaded.model.config.hidden_size)
    np.testing.assert_array_equal(report.layer_weights[probe.layer].astype(np.float32), probe.weight)
    written = save_probe(tmp_path / "p", report)
    assert [p.name for p in written] == ["probe.json", "probe.safetensors", "dev_auroc.png"]
    again = Probe.load(tmp_path / "p")
    np.testing.assert_array_equal(again.weight, probe.weight)
    assert (again.layer, again.normalization, again.card["dev_auroc"]) == (
        probe.layer,
        probe.normalization,
        report.dev_auroc,
    )


def test_bad_training_sets_are_refused(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir))
    texts = texts_of(12, seed=4)
    dev = Dataset(texts[:4], None, [0, 1, 0, 1])
    with pytest.raises(MiaFastError, match="3 members and 3 non-members; it needs at least 4 of each class"):
        train_probe(loaded, Dataset(texts[:6], None, [0, 1] * 3), dev)
    with pytest.raises(MiaFastError, match="12 members and 0 non-members"):
        train_probe(loaded, Dataset(texts, None, [1] * 12), dev)
    with pytest.raises(MiaFastError, match="dev set has 0 members and 4 non-members; it needs both classes"):
        train_probe(loaded, Dataset(texts, None, [0, 1] * 6), Dataset(texts[:4], None, [0] * 4))


def test_a_diverging_proxy_stops_and_says_so(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir))
    texts = texts_of(12, seed=5)
    with pytest.raises(TrainingDiverged, match="the loss is (nan|inf) at step"):
        train_probe(
            loaded,
            Dataset(texts, None, [0, 1] * 6),
            Dataset(texts[:4], None, [0, 1] * 2),
            ProbeTraining(learning_rate=1e30, epochs=3),
        )


def test_probe_train_keeps_the_proxy_when_asked(tiny_model_dir, tmp_path):
    texts = texts_of(16, seed=10)
    train = write_jsonl(tmp_path / "train.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts[:8])])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts[8:])])
    assert (
        run_cli(
            "probe",
            "train",
            "--train",
            train,
            "--dev",
            dev,
            "--model",
            tiny_model_dir,
            "--probe-epochs",
            "20",
            "--keep-proxy",
            "--out",
            tmp_path / "p",
            "--quiet",
        )
        == 0
    )
    proxy = load_model(str(tmp_path / "p" / "proxy"))
    original = load_model(str(tiny_model_dir))
    assert proxy.weights_fingerprint() != original.weights_fingerprint()
