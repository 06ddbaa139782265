"""A method with a setting of its own is added from this file alone: its flag appears in ``mia-fast score
--help``, a missing value gets the registry's error, and its column appears in the output. No other file of
the project knows of it (docs/adding-a-method.md walks through the same steps). And a method is one file: a module
written into a copy of the package's methods folder, and nothing else, is found, scored and documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import package_copy_with

from mia_fast.cli import main
from mia_fast.methods import REGISTRY, register, setting
from mia_fast.methods.inputs import ScoringInputs, mean_loss
from mia_fast.methods.settings import CheckedSettings, Flag, GivesExample
from mia_fast.scoring.method_runs import example_settings


@dataclass(frozen=True)
class ShiftedLossSettings(CheckedSettings, GivesExample):
    shift: float | None = setting(
        None,
        "the amount added to -loss",
        Flag("loss-shift", metavar="X", parse=float),
        required=True,
        supply="a shift (--loss-shift X)",
    )

    @classmethod
    def example(cls, model: Any) -> ShiftedLossSettings:
        """A shift any model runs with: what the contract tests use."""
        return cls(shift=0.25)


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


def test_its_example_is_what_the_contract_tests_run_it_with(registered):
    assert example_settings([REGISTRY["shifted_loss"]], None).of(ShiftedLossSettings).shift == 0.25


def test_its_column_appears_in_the_output(registered, tiny_model_dir, tmp_path):
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a fox", "the lazy dog sleeps"]))
    out = tmp_path / "s.jsonl"
    args = ["score", str(data), "--model", str(tiny_model_dir), "--out", str(out), "--quiet"]
    assert main([*args, "--methods", "loss,shifted_loss", "--loss-shift", "0.25"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(row) >= {"loss", "shifted_loss"} for row in rows)
    np.testing.assert_allclose([r["shifted_loss"] for r in rows], [r["loss"] + 0.25 for r in rows], rtol=1e-12)


ROOT = Path(__file__).resolve().parents[2]
# A method module as its author writes it: the one file added to the package.
TOY_MODULE = textwrap.dedent(
    '''
    """A toy method: -loss plus a shift."""

    from dataclasses import dataclass
    from typing import Any

    import numpy as np

    from mia_fast.methods.inputs import ScoringInputs, mean_loss
    from mia_fast.methods.registry import register
    from mia_fast.methods.settings import CheckedSettings, GivesExample, Range, setting


    @dataclass(frozen=True)
    class ToySettings(CheckedSettings, GivesExample):
        shift: float = setting(0.0, "the amount the toy adds to -loss", "toy-shift", bounds=Range(-10, 10))

        @classmethod
        def example(cls, model: Any) -> "ToySettings":
            return cls(shift=1.0)


    @register("toy", settings=[ToySettings])
    def toy_score(inputs: ScoringInputs) -> np.ndarray:
        """Toy: -loss plus a shift."""
        return -mean_loss(inputs.stats) + inputs.settings.of(ToySettings).shift
    '''
)
# Runs the CLI on the package copy on PYTHONPATH: the editable install's import hook, which sends ``import mia_fast`` to
# this checkout whatever PYTHONPATH says, is dropped first (as benchmarks/before_after.sh does).
RUN_COPY = """
import contextlib, io, json, sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != 'ScikitBuildRedirectingFinder']
import mia_fast
from mia_fast.cli import main
from mia_fast.methods import ToySettings
from mia_fast.methods.catalogue import methods_page
from mia_fast.scoring.method_runs import example_settings
help_text = io.StringIO()
with contextlib.redirect_stdout(help_text):
    main(["score", "--help"])
code = main(sys.argv[1:])
print(json.dumps({"package": mia_fast.__file__, "help": help_text.getvalue(), "code": code, "docs": methods_page(),
                  "example": example_settings([mia_fast.REGISTRY["toy"]], None).of(ToySettings).shift}))
"""


def test_a_method_module_added_to_the_folder_is_found_scored_and_documented(tiny_model_dir, tmp_path):
    site = package_copy_with(tmp_path, "methods/toy.py", TOY_MODULE)
    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["a fox", "the lazy dog sleeps"]))
    out = tmp_path / "s.jsonl"
    args = ["score", data, "--model", tiny_model_dir, "--out", out, "--quiet", "--methods", "loss,toy"]
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, "-c", RUN_COPY, *map(str, [*args, "--toy-shift", "0.25"])],
        env=env,
        cwd=tmp_path,  # not this checkout, which ``python -c`` would put first on sys.path
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert Path(result["package"]).parent == site / "mia_fast" and result["code"] == 0
    assert "--toy-shift TOY_SHIFT" in result["help"] and "the amount the toy adds to -loss" in result["help"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    np.testing.assert_allclose([r["toy"] for r in rows], [r["loss"] + 0.25 for r in rows], rtol=1e-12)
    assert "| `toy` | Toy: -loss plus a shift. |" in result["docs"] and result["example"] == 1.0
    assert "toy" not in REGISTRY  # this checkout's package never saw it
