"""Score outputs: rows appended block by block to a stage and renamed into place whole with their manifest, an
interrupted output resumed only with the same columns and settings, and the differences named."""

import json

import pytest

from mia_fast.data.outputs import ResultWriter, differences, manifest_path, stage_path
from mia_fast.errors import MiaFastError

ROWS = [{"id": i, "loss": -float(i)} for i in range(6)]


def test_rows_appear_only_when_the_output_is_complete(tmp_path):
    out = tmp_path / "o.jsonl"
    writer = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    writer.write(ROWS[:3])
    assert not out.exists() and stage_path(out).is_dir()
    writer.write(ROWS[3:])
    writer.close()
    assert [json.loads(line) for line in out.read_text().splitlines()] == ROWS
    assert not stage_path(out).exists() and manifest_path(out).is_file() and writer.done_rows == 6


def test_an_interrupted_output_resumes_only_with_the_same_settings(tmp_path):
    out = tmp_path / "o.jsonl"
    first = ResultWriter(out, ["id", "loss"], settings={"k": 1})
    first.write(ROWS[:3])  # the run stops here: its block stays in the stage
    with pytest.raises(MiaFastError, match="holds the finished rows of an interrupted run; pass --resume"):
        ResultWriter(out, ["id", "loss"], settings={"k": 1})
    with pytest.raises(MiaFastError, match="k: 1 before, now 2"):
        ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 2})
    resumed = ResultWriter(out, ["id", "loss"], resume=True, settings={"k": 1})
    assert resumed.done_rows == 3
    resumed.write(ROWS[3:])
    resumed.close()
    assert [json.loads(line) for line in out.read_text().splitlines()] == ROWS


def test_differences_name_each_setting_that_changed():
    assert differences({"a": 1, "b": "x" * 30}, {"a": 1, "b": "y", "c": 0}) == [
        "b: 'xxxxxxxxxxxxx...' before, now 'y'",
        "c: None before, now 0",
    ]
