"""A run's outputs owned as one (data.run_outputs): the scores and a file beside them written block by block and
closed together; a file beside the scores holding fewer rows than they refused on resume; a failed run leaves no
new file."""

import json

import pytest

from mia_fast.data.run_outputs import RunOutputs
from mia_fast.errors import MiaFastError

COLUMNS, BESIDE = ["id", "loss"], ["row", "scores"]


def outputs(out, *, resume=False):
    beside = {out.with_suffix(".windows.jsonl"): BESIDE}
    return RunOutputs(out, COLUMNS, beside=beside, resume=resume, overwrite=False, settings={"k": 1}, run_file=None)


def rows(first, count):
    return [{"id": i, "loss": -float(i)} for i in range(first, first + count)]


def windows(out, first, count):
    return {out.with_suffix(".windows.jsonl"): [{"row": i, "scores": [float(i)]} for i in range(first, first + count)]}


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_scores_and_the_file_beside_them_are_written_together(tmp_path):
    out = tmp_path / "s.jsonl"
    with outputs(out) as run:
        run.write(rows(0, 2), [b"a", b"b"], windows(out, 0, 2))
        run.write(rows(2, 1), [b"c"], windows(out, 2, 1))
    assert read(out) == rows(0, 3)
    assert [r["row"] for r in read(out.with_suffix(".windows.jsonl"))] == [0, 1, 2]
    assert run.done_rows == 3 and list(run.written_column("id")) == [0, 1, 2]


def test_a_file_beside_the_scores_with_fewer_rows_than_they_is_refused_on_resume(tmp_path):
    out = tmp_path / "s.jsonl"
    with pytest.raises(KeyboardInterrupt), outputs(out) as run:
        run.write(rows(0, 2), [b"a", b"b"], windows(out, 0, 2))
        run.write(rows(2, 1), [b"c"], {})  # its windows never written: the file beside holds fewer rows
        raise KeyboardInterrupt
    with pytest.raises(MiaFastError, match="holds 2 rows but .* 3; pass --overwrite"), outputs(out, resume=True):
        pass


def test_a_failed_fresh_run_leaves_no_file(tmp_path):
    out = tmp_path / "s.jsonl"
    with pytest.raises(RuntimeError), outputs(out):
        raise RuntimeError("scoring failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
