"""The controlled-contamination experiment on a tiny model: the split, fine-tuning, the report, the
demo command, and its bad inputs (too small a corpus, a diverging fine-tuning)."""

import json

import numpy as np
import pytest
import torch
from conftest import CORPUS
from helpers import fail, run_cli

from mia_fast import load_model
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.corpus import prepare_texts
from mia_fast.evaluation.experiments import ExperimentDesign, FineTuning, TrainingDiverged, run_experiment
from mia_fast.methods.dcpdd import DcpddSettings
from mia_fast.methods.pac import PacSettings
from mia_fast.methods.samia import SamiaSettings
from mia_fast.scoring.config import ScoringConfig


def corpus_texts(n=40):
    words = " ".join(CORPUS).split()
    rng = np.random.default_rng(3)
    return [" ".join(rng.choice(words, size=int(rng.integers(8, 20)))) for _ in range(n)]


def test_fine_tuning_plants_members_that_the_methods_find(tiny_model_dir, tmp_path):
    loaded = load_model(str(tiny_model_dir))
    tuning = FineTuning(epochs=6, learning_rate=3e-3, batch_size=4, max_tokens=24, seed=0)
    experiment, assessed = run_experiment(
        loaded,
        corpus_texts(),
        tmp_path / "r",
        ExperimentDesign(tuning=tuning, texts=24, bootstrap=50),
        ScoringConfig(methods=["loss", "mink", "ref"], k=[0.2]),
    )
    assert experiment.losses[-1] < experiment.losses[0]
    assert assessed.results["ref"].auroc > 0.9 and assessed.results["loss"].auroc > 0.8
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())["meta"]
    assert meta["members"] == 12 and meta["epochs"] == 6 and meta["steps"] == 18
    for name in ("report.md", "report.html", "roc.png", "histograms.png", "training_loss.png", "scores.jsonl"):
        assert (tmp_path / "r" / name).is_file()
    assert "Fine-tuning loss on the members" in (tmp_path / "r" / "report.md").read_text()


def test_prefixes_are_drawn_beside_the_experiment_never_scored_and_only_the_member_prefix_trained_on(
    tiny_model_dir, tmp_path
):
    loaded = load_model(str(tiny_model_dir))
    tuning = FineTuning(epochs=1, learning_rate=1e-3, batch_size=4, max_tokens=8, seed=0)
    experiment, assessed = run_experiment(
        loaded,
        corpus_texts(),
        tmp_path / "r",
        ExperimentDesign(tuning=tuning, texts=16, bootstrap=20, prefix_shots=2),
        ScoringConfig(methods=["loss", "recall", "conrecall"]),
    )
    assert set(assessed.results) - set(BLIND_COLUMNS) == {"loss", "recall", "conrecall"} and np.isfinite(
        assessed.results["conrecall"].auroc
    )
    assert len(experiment.texts) == 16
    drawn = prepare_texts(corpus_texts(), loaded.tokenizer, count=20, max_tokens=8, seed=0)
    assert sorted(experiment.texts) == sorted(drawn[:16]) and not set(drawn[16:]) & set(experiment.texts)
    assert experiment.prefix_members == drawn[18:] and set(drawn[18:]) <= set(experiment.trained)
    assert not set(drawn[16:18]) & set(experiment.trained)
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())["meta"]
    assert meta["prefix_nonmember_shots"] == 2 and meta["prefix_member_shots"] == 2


def test_the_neighbour_attack_in_the_experiment_uses_word_drop_neighbours_by_default(tiny_model_dir, tmp_path):
    loaded = load_model(str(tiny_model_dir))
    tuning = FineTuning(epochs=1, learning_rate=1e-3, batch_size=4, max_tokens=8, seed=0)
    _, assessed = run_experiment(
        loaded,
        corpus_texts(),
        tmp_path / "r",
        ExperimentDesign(tuning=tuning, texts=16, bootstrap=20),
        ScoringConfig(methods=["loss", "neighbor"]),
    )
    assert set(assessed.results) - set(BLIND_COLUMNS) == {"loss", "neighbor"} and np.isfinite(
        assessed.results["neighbor"].auroc
    )
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())["meta"]
    assert meta["neighbor_model"] == "word-drop" and "neighbor_count" not in meta  # recorded where not the default


def test_the_experiment_runs_the_sampled_white_box_and_frequency_methods_with_its_settings(tiny_model_dir, tmp_path):
    loaded = load_model(str(tiny_model_dir))
    tuning = FineTuning(epochs=1, learning_rate=1e-3, batch_size=4, max_tokens=8, seed=0)
    counts = np.ones(loaded.vocab_size, dtype=np.int64)
    methods = ["loss", "dcpdd", "samia", "pac", "gradnorm"]
    _, assessed = run_experiment(
        loaded,
        corpus_texts(),
        tmp_path / "r",
        ExperimentDesign(tuning=tuning, texts=16, bootstrap=20),
        ScoringConfig(
            methods=methods,
            settings=[
                DcpddSettings(frequencies=counts),
                SamiaSettings(samples=2, seed=tuning.seed),
                PacSettings(copies=2, seed=tuning.seed),
            ],
        ),
    )
    assert set(assessed.results) - set(BLIND_COLUMNS) == set(methods) and all(
        np.isfinite(assessed.results[m].auroc) for m in methods
    )
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())["meta"]
    assert meta["samia_samples"] == 2 and meta["pac_copies"] == 2


def test_probe_in_the_experiment_has_its_own_training_set_and_a_dev_set_no_method_is_evaluated_on(
    tiny_model_dir, tmp_path
):
    from mia_fast.evaluation.probe_training import ProbeTraining

    loaded = load_model(str(tiny_model_dir))
    tuning = FineTuning(epochs=1, learning_rate=1e-3, batch_size=4, max_tokens=8, seed=0)
    experiment, assessed = run_experiment(
        loaded,
        corpus_texts(),
        tmp_path / "r",
        ExperimentDesign(
            tuning=tuning, texts=16, bootstrap=20, probe_texts=12, probe_training=ProbeTraining(probe_epochs=50)
        ),
        ScoringConfig(methods=["loss", "probe"]),
    )
    assert (
        set(assessed.results) - set(BLIND_COLUMNS) == {"loss", "probe"}
        and assessed.results["probe"].n_members == assessed.results["probe"].n_nonmembers == 6
    )
    assert len(experiment.dev_members) == len(experiment.dev_nonmembers) == 2 and len(experiment.trained) == 8
    assert not set(experiment.dev_members + experiment.dev_nonmembers) & set(experiment.texts)
    meta = json.loads((tmp_path / "r" / "metrics.json").read_text())["meta"]
    assert meta["probe_texts"] == 12 and 0 <= meta["probe_layer"] < 2
    assert (tmp_path / "r" / "probe_dev_auroc.png").stat().st_size > 5000
    assert "Probe: dev AUROC by layer" in (tmp_path / "r" / "report.md").read_text()


def test_a_diverging_fine_tuning_stops_and_keeps_a_report(tiny_model_dir, tmp_path, monkeypatch):
    loaded = load_model(str(tiny_model_dir))
    forward = loaded.model.forward
    calls = []

    def nan_on_third_step(*args, **kwargs):
        output = forward(*args, **kwargs)
        if torch.is_grad_enabled():  # a training step, not the measure of the untouched model's loss
            calls.append(1)
            if len(calls) == 3:
                output.loss = output.loss * torch.tensor(float("nan"))
        return output

    monkeypatch.setattr(loaded.model, "forward", nan_on_third_step)
    with pytest.raises(TrainingDiverged, match="the loss is nan at step 3"):
        run_experiment(
            loaded,
            corpus_texts(),
            tmp_path / "r",
            ExperimentDesign(tuning=FineTuning(epochs=2, batch_size=4, max_tokens=16), texts=16),
        )
    report = (tmp_path / "r" / "report.md").read_text()
    assert "stopped" in report and "| 3 | nan |" in report and (tmp_path / "r" / "training_loss.png").is_file()
    assert not (tmp_path / "r" / "metrics.json").exists()


def test_demo_command_end_to_end(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"body": t}) + "\n" for t in corpus_texts()))
    args = [
        "demo",
        "--model",
        tiny_model_dir,
        "--corpus",
        corpus,
        "--text-field",
        "body",
        "--texts",
        "16",
        "--epochs",
        "2",
        "--max-tokens",
        "16",
        "--batch-size",
        "4",
        "--methods",
        "loss,zlib,mink_0.2,minkpp_0.2",
        "--bootstrap",
        "20",
        "--quiet",
    ]
    assert run_cli(*args, "--report", tmp_path / "r") == 0
    out = capsys.readouterr().out
    assert "8 members fine-tuned for 2 epoch(s)" in out and "minkpp_0.2" in out and "members: 8, non-members: 8" in out
    assert "is not empty; pass --overwrite" in fail(capsys, *args, "--report", tmp_path / "r")
    assert "argument --epochs: must be a whole number in [1, 1000]" in fail(
        capsys, *args[:-1], "--epochs", "0", "--report", tmp_path / "r2"
    )


def test_a_fine_tuning_with_dropout_repeats_exactly_and_leaves_the_global_generator_alone(tiny_model_dir):
    from mia_fast.generation.finetune import FineTuning, fine_tune

    def tuned_losses(caller_seed: int) -> tuple[list[float], torch.Tensor]:
        loaded = load_model(str(tiny_model_dir))
        for module in loaded.model.modules():
            if hasattr(module, "attention_dropout"):
                module.attention_dropout = 0.5  # dropout draws random numbers in training
        torch.manual_seed(caller_seed)  # whatever state the caller left the global generator in
        losses = fine_tune(
            loaded, corpus_texts(8), FineTuning(epochs=2, learning_rate=1e-3, batch_size=4, max_tokens=None)
        )
        return losses, torch.rand(1)

    first, after_first = tuned_losses(caller_seed=1)
    second, _ = tuned_losses(caller_seed=2)
    assert first == second
    torch.manual_seed(1)
    assert torch.equal(after_first, torch.rand(1))  # the caller's generator is as it was
