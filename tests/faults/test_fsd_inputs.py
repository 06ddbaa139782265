"""FSD's bad inputs: each refused in one line before any model loads, nothing written."""

import pytest
from helpers import refused, write_jsonl

from mia_fast.pipeline import models

NONMEMBER_LINES = "Mountain goats climb the cliffs\nSnow falls on the high passes\n"


@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "_load_pretrained", refuse)


@pytest.fixture
def files(tmp_path):
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": "the quick brown fox"}, {"text": "a stitch in time"}])
    nonmembers = tmp_path / "nonmembers.txt"
    nonmembers.write_text(NONMEMBER_LINES)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    return data, nonmembers, empty


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ([], "method 'fsd_loss' needs known non-member texts (--nonmembers FILE)"),
        (["--nonmembers", "{empty}"], "empty.txt: holds no texts"),
        (["--nonmembers", "{missing}"], "missing.txt"),
        (["--nonmembers", "{nonmembers}", "--fsd-lr", "0"], "argument --fsd-lr: must be a number in (0, 1]"),
        (["--nonmembers", "{nonmembers}", "--fsd-lr", "nan"], "argument --fsd-lr: must be a number in (0, 1]"),
        (
            ["--nonmembers", "{nonmembers}", "--fsd-epochs", "0"],
            "argument --fsd-epochs: must be a whole number in [1, 1000]",
        ),
        (["--nonmembers", "{nonmembers}", "--fsd-batch-size", "1.5"], "argument --fsd-batch-size: must be a whole"),
        (
            ["--nonmembers", "{nonmembers}", "--fsd-seed", "-1"],
            "argument --fsd-seed: must be a whole number in [0, 4294967295]",
        ),
        (["--nonmembers", "{nonmembers}", "--fsd-max-tokens", "0"], "argument --fsd-max-tokens"),
        # Scored texts that are also non-member texts fine-tuned on.
        (["--nonmembers", "{data}"], "2 scored text(s) are also known non-member texts"),
        (
            ["--nonmembers", "{data}", "--methods", "loss,fsd_minkpp"],
            "2 scored text(s) are also known non-member texts",
        ),
    ],
)
def test_bad_fsd_inputs_are_refused_before_any_model_loads(
    tmp_path, capsys, tiny_model_dir, files, no_model_loads, extra, expected
):
    data, nonmembers, empty = files
    places = {"empty": empty, "missing": tmp_path / "missing.txt", "nonmembers": nonmembers, "data": data}
    extra = [str(a).format(**places) for a in extra]
    if "--methods" not in extra:
        extra += ["--methods", "fsd_loss"]
    line = refused(
        capsys, "score", data, "--model", tiny_model_dir, *extra, "--out", tmp_path / "out.jsonl", keep=[tmp_path]
    )
    assert expected in line, line


@pytest.mark.parametrize("methods", ["fsd_loss", "loss,fsd_mink", "fsd_zlib"])
def test_fsd_with_a_served_model_is_refused_before_connecting(tmp_path, capsys, files, no_model_loads, methods):
    data, nonmembers, _ = files
    line = refused(
        capsys,
        "score",
        data,
        "--server",
        "http://127.0.0.1:9",
        "--server-model",
        "m",
        "--methods",
        methods,
        "--nonmembers",
        nonmembers,
        "--out",
        tmp_path / "out.jsonl",
        keep=[tmp_path],
    )
    assert "needs a copy of the target fine-tuned here" in line and "a served model" in line, line
