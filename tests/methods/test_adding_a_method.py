"""A method with a setting of its own is added from this file alone: its flag appears in ``mia-fast score
--help``, a missing value gets the registry's error, and its column appears in the output. No other file of
the project knows of it (docs/adding-a-method.md walks through the same steps)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from mia_fast.cli import main
from mia_fast.methods import REGISTRY, ScoringInputs, register, setting
from mia_fast.methods.registry import mean_loss
from mia_fast.methods.settings import Flag


@dataclass(frozen=True)
class ShiftedLossSettings:
    shift: float | None = setting(
        None,
        "the amount added to -loss",
        Flag("loss-shift", metavar="X", parse=float),
        required=True,
        supply="a shift (--loss-shift X)",
    )


def shifted_loss(inputs: ScoringInputs) -> np.ndarray:
    """-loss plus a fixed shift."""
    return -mean_loss(inputs.stats) + inputs.settings.of(ShiftedLossSettings).shift


@pytest.fixture
def registered():
    register("shifted_loss", settings=[ShiftedLossSettings])(shifted_loss)
    yield
    del REGISTRY["shifted_loss"]


def test_its_flag_appears_in_the_help(registered, capsys):
    assert main(["score", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--loss-shift X" in help_text and "for shifted_loss: the amount added to -loss" in help_text
    methods_help = help_text.split("--methods METHODS")[-1].split("--k K")[0]
    assert "shifted_loss" in "".join(methods_help.split())  # argparse wraps the list anywhere


def test_a_missing_setting_gets_the_registrys_error(registered, tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "texts.jsonl"
    data.write_text(json.dumps({"text": "a fox"}) + "\n")
    code = main(
        [
            "score",
            str(data),
            "--model",
            str(tiny_model_dir),
            "--methods",
            "shifted_loss",
            "--out",
            str(tmp_path / "s.jsonl"),
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "mia-fast: error: method 'shifted_loss' needs a shift (--loss-shift X)"
    ]
    assert not (tmp_path / "s.jsonl").exists()


def test_its_column_appears_in_the_output(registered, tiny_model_dir, tmp_path):
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a fox", "the lazy dog sleeps"]))
    out = tmp_path / "s.jsonl"
    args = ["score", str(data), "--model", str(tiny_model_dir), "--out", str(out), "--quiet"]
    assert main([*args, "--methods", "loss,shifted_loss", "--loss-shift", "0.25"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(row) >= {"loss", "shifted_loss"} for row in rows)
    np.testing.assert_allclose([r["shifted_loss"] for r in rows], [r["loss"] + 0.25 for r in rows], rtol=1e-12)
