"""The gradient norm: its closed form on the head, a per-text backward over all parameters, the bad settings, and
its default norm recorded and resumed."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_cli, write_jsonl

from mia_fast import ComputeConfig, Detector
from mia_fast.errors import MiaFastError
from mia_fast.methods.gradnorm import GradnormSettings

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be that is the question",
    "hello world again and again",
]


def test_gradnorm_of_the_head_equals_its_closed_form(tiny_model_dir):
    """d mean-loss / d W_head = (1/T) Σ_t (softmax(W h_t) - onehot(y_t)) h_tᵀ, computed without autograd."""
    detector = Detector(str(tiny_model_dir), [GradnormSettings(norm=2, params=("lm_head.weight",))])
    model, engine = detector.target.loaded.model, detector.target
    got = detector.score(TEXTS, methods=["gradnorm"])["gradnorm"]
    for i, text in enumerate(TEXTS):
        ids = engine.tokenize([text])[0]
        with torch.inference_mode():
            hidden = model.base_model(torch.tensor([ids])).last_hidden_state[0, :-1].double()
        weight = model.lm_head.weight.detach().double()
        residual = torch.softmax(hidden @ weight.T, -1)
        residual[torch.arange(len(ids) - 1), torch.tensor(ids[1:])] -= 1
        gradient = residual.T @ hidden / (len(ids) - 1)
        assert got[i] == pytest.approx(-torch.linalg.norm(gradient).item(), rel=1e-4)


def test_gradnorm_over_all_parameters_matches_a_per_text_backward_and_leaves_the_model_as_it_was(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), compute=ComputeConfig(batch_tokens=16))
    model, engine = detector.target.loaded.model, detector.target
    flags = [p.requires_grad for p in model.parameters()]
    long_text = " ".join(["the lazy dog sleeps under the warm sun"] * 12)  # longer than the 64-token window
    got = detector.score([*TEXTS, long_text, ""], methods=["gradnorm"])["gradnorm"]
    assert [p.requires_grad for p in model.parameters()] == flags and all(p.grad is None for p in model.parameters())
    for i, text in enumerate(TEXTS):
        ids = torch.tensor([engine.tokenize([text])[0]])
        model.zero_grad()
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])
        (-logp.mean()).backward()
        expected = torch.stack([p.grad.abs().max() for p in model.parameters() if p.grad is not None]).mean().item()
        model.zero_grad(set_to_none=True)
        assert got[i] == pytest.approx(-expected, rel=1e-4)
    assert np.isfinite(got[3]) and np.isnan(got[4])


def test_a_parameter_pattern_that_matches_nothing_is_refused(tiny_model_dir):
    with pytest.raises(MiaFastError, match="no parameter of .* matches model.nothing.*"):
        Detector(str(tiny_model_dir), [GradnormSettings(params=("model.nothing.*",))]).score(
            TEXTS, methods=["gradnorm"]
        )


def test_gradnorm_at_its_default_norm_is_recorded_and_resumed(tmp_path, tiny_model_dir, capsys):
    """inf, the default norm, is no JSON number: the manifest records it as text, and a resume agrees with it."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": t} for i, t in enumerate(TEXTS)])
    out = tmp_path / "s.jsonl"
    args = ["score", str(data), "--model", str(tiny_model_dir), "--methods", "gradnorm", "--out", str(out), "--quiet"]
    assert run_cli(*args) == 0
    assert json.loads(Path(f"{out}.manifest.json").read_text())["settings"]["gradnorm_norm"] == "inf"
    assert run_cli(*args, "--resume") == 0
    assert "already scored" in capsys.readouterr().err


def test_a_norm_other_than_1_2_or_inf_is_refused_before_any_model_is_loaded():
    with pytest.raises(MiaFastError, match="order must be 1, 2 or inf"):
        GradnormSettings(norm=3)
