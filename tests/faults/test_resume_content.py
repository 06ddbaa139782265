"""--resume trusts no staged byte it has not checked: every block's digest is in the manifest and is checked before
a row is scored, so an edited, cut or orphaned stage is one line that says what happened and what to do, and
nothing that was there changes (``refused``)."""

from __future__ import annotations

import json

import pytest
from helpers import FAST, fail_writes, read_jsonl, refused, run_cli

from mia_fast.data.outputs import manifest_path, stage_path


def score(data, model, out, *extra):
    return ["score", data, "--model", model, "--out", out, *FAST, "--block-rows", "4", *extra]


@pytest.fixture
def interrupted(tiny_model_dir, labelled_jsonl, tmp_path, monkeypatch, capsys):
    """A run stopped by a full disk after 3 finished blocks of 4 rows: OUT.partial/ holds 12 rows."""
    out = tmp_path / "scores.jsonl"
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=3)
        assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 2
    capsys.readouterr()
    rows = stage_path(out) / "rows.jsonl"
    assert len(rows.read_text().splitlines()) >= 12
    return out


def test_an_edited_staged_score_is_refused_not_published(interrupted, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    rows = stage_path(interrupted) / "rows.jsonl"
    lines = rows.read_text().splitlines(keepends=True)
    first = json.loads(lines[5])
    first["loss"] = round(first["loss"], 3) + 10.0  # one score edited; the row grows or shrinks by a few bytes
    lines[5] = json.dumps(first) + "\n"
    rows.write_text("".join(lines))
    line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, interrupted), "--resume", keep=[tmp_path])
    assert "rows 5-8 of" in line and "were changed after they were written" in line and "--overwrite" in line
    assert not interrupted.exists()


def test_a_same_length_edit_is_caught_by_the_digest(interrupted, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    rows = stage_path(interrupted) / "rows.jsonl"
    data = bytearray(rows.read_bytes())
    position = data.index(b'"loss": ') + len(b'"loss": ') + 3
    data[position] = ord("7") if data[position] != ord("7") else ord("8")
    rows.write_bytes(bytes(data))
    line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, interrupted), "--resume", keep=[tmp_path])
    assert "rows 1-4 of" in line and "changed after they were written" in line


def test_a_cut_stage_is_one_line_before_any_resuming(interrupted, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    rows = stage_path(interrupted) / "rows.jsonl"
    kept = json.loads((stage_path(interrupted) / "manifest.json").read_text())["blocks"][-1]["bytes"]
    rows.write_bytes(rows.read_bytes()[: kept - 40])
    line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, interrupted), "--resume", keep=[tmp_path])
    assert "is shorter than its manifest says" in line and "pass --overwrite to score again" in line
    assert "resuming" not in line


def test_a_stage_without_its_manifest_is_one_line_and_kept(
    interrupted, tiny_model_dir, labelled_jsonl, tmp_path, capsys
):
    (stage_path(interrupted) / "manifest.json").unlink()
    for flags in (["--resume"], ["--overwrite"], []):
        line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, interrupted), *flags, keep=[tmp_path])
        assert "holds no manifest of one" in line and "left as it is" in line


def test_a_stage_whose_rows_went_is_one_line(interrupted, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    (stage_path(interrupted) / "rows.jsonl").unlink()
    line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, interrupted), "--resume", keep=[tmp_path])
    assert "is missing from its stage" in line


def test_an_intact_stage_resumes_to_the_uninterrupted_scores(interrupted, tiny_model_dir, labelled_jsonl, tmp_path):
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, interrupted), "--resume") == 0
    fresh = tmp_path / "fresh.jsonl"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, fresh)) == 0
    assert read_jsonl(interrupted) == read_jsonl(fresh)
    blocks = json.loads(manifest_path(interrupted).read_text())["blocks"]
    assert len(blocks) == 6 and all(len(block["digest"]) == 64 for block in blocks)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_an_edited_complete_output_is_refused_on_resume(tiny_model_dir, labelled_jsonl, tmp_path, capsys, suffix):
    out = tmp_path / f"scores{suffix}"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 0
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0x01
    out.write_bytes(bytes(data))
    line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, out), "--resume", keep=[tmp_path])
    assert "changed after" in line and "--overwrite" in line


def test_a_manifest_write_cut_by_a_kill_is_no_foreign_file(interrupted, tiny_model_dir, labelled_jsonl, tmp_path):
    """A run killed while writing its manifest leaves the temporary file the manifest is written to (then renamed):
    that file is the tool's own, so --resume takes the stage and the completed output leaves no trace of it."""
    (stage_path(interrupted) / ".manifest.json.k1ll3d.tmp").write_text('{"half": ')
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, interrupted), "--resume") == 0
    assert len(read_jsonl(interrupted)) == 24 and not stage_path(interrupted).exists()
