"""An output's side files (data.side_files): where the stage, manifest and run file sit, and anything at those
paths that is not this tool's refused and left as it is."""

from pathlib import Path

import pytest

from mia_fast.data.side_files import check_side_files, manifest_path, run_file_path, stage_path
from mia_fast.errors import MiaFastError


def test_the_side_files_sit_beside_the_output():
    out = Path("runs/s.jsonl")
    assert stage_path(out) == Path("runs/s.jsonl.partial")
    assert manifest_path(out) == Path("runs/s.jsonl.manifest.json")
    assert run_file_path(out) == Path("runs/s.jsonl.run.toml")


def test_a_side_file_that_is_not_this_tools_is_refused_and_left(tmp_path):
    out = tmp_path / "s.jsonl"
    check_side_files(out)
    manifest_path(out).write_text("{}")
    with pytest.raises(MiaFastError, match="is not a manifest of mia-fast"):
        check_side_files(out)
    assert manifest_path(out).read_text() == "{}"
