"""Faults around score outputs: nothing a user already has is ever lost. Every refusal is one line with exit 2 and
leaves every file that was there byte-identical (``refused``); a full disk at any block, a kill, or a second
writer loses no finished row, and a resumed run equals an uninterrupted one."""

from __future__ import annotations

import errno
import json
import os
import random
import stat
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from helpers import FAST, digests, fail_writes, read_jsonl, refused, rows_in, run_cli, wait_until, write_jsonl

from mia_fast.data.artefacts import OutputLock
from mia_fast.data.outputs import ResultWriter, manifest_path, stage_path
from mia_fast.errors import MiaFastError


def score(data, model, out, *extra):
    return ["score", data, "--model", model, "--out", out, *FAST, *extra]


@pytest.fixture
def scored(tiny_model_dir, labelled_jsonl, tmp_path):
    """A good output of the 24 labelled rows, made before each fault."""
    out = tmp_path / "scores.jsonl"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 0
    return out


def corrupted_frequency_table(model, tmp_path):
    corpus = write_jsonl(tmp_path / "corpus" / "c.jsonl", [{"text": f"the quick brown fox {i}"} for i in range(20)])
    table = tmp_path / "c.freq"
    assert run_cli("freq", "build", corpus, "--tokenizer", model, "--out", table, "--quiet") == 0
    data = bytearray(table.read_bytes())
    data[len(data) // 2] ^= 0x01
    table.write_bytes(bytes(data))
    return table


def test_overwrite_keeps_the_output_when_the_run_is_refused(scored, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    table = corrupted_frequency_table(tiny_model_dir, tmp_path)
    bad_runs = {
        "no such model directory": ["--model", tmp_path / "missing-model"],
        "CUDA is not available": ["--device", "cuda"],
        "checksum": ["--methods", "dcpdd", "--freq-table", table],
    }
    for reason, options in bad_runs.items():
        line = refused(capsys, *score(labelled_jsonl, tiny_model_dir, scored), *options, "--overwrite", keep=[tmp_path])
        assert reason in line


def test_a_failed_fresh_run_leaves_no_file_and_the_corrected_rerun_needs_no_flag(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "new.jsonl"
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=0)
        assert "nothing was written" in refused(capsys, *score(labelled_jsonl, tiny_model_dir, out), keep=[tmp_path])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 0
    assert len(read_jsonl(out)) == 24
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.jsonl", "new.jsonl.manifest.json", "new.jsonl.run.toml"]


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
def test_the_input_is_never_the_output(tiny_model_dir, labelled_jsonl, tmp_path, capsys, flags):
    data = tmp_path / "data.jsonl"
    data.write_bytes(labelled_jsonl.read_bytes())
    (tmp_path / "link.jsonl").symlink_to(data)
    (tmp_path / "sub").mkdir()
    for spelling in (data, tmp_path / "link.jsonl", tmp_path / "sub" / ".." / "data.jsonl"):
        line = refused(capsys, *score(data, tiny_model_dir, spelling), *flags, keep=[tmp_path])
        assert "is the input" in line and "choose another --out" in line
    line = refused(capsys, *score(tmp_path / "link.jsonl", tiny_model_dir, data), *flags, keep=[tmp_path])
    assert "is the input" in line


def test_a_lone_surrogate_is_replaced_with_a_warning_naming_its_row(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": 1, "text": "fine text"}\n{"id": 2, "text": "broken \\ud800 half"}\n')
    out = tmp_path / "o.jsonl"
    assert run_cli(*score(data, tiny_model_dir, out)) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("mia-fast: warning:")]
    assert warnings == [f"mia-fast: warning: {data}: row at line 2: 1 lone surrogate(s) replaced by U+FFFD"]
    rows = read_jsonl(out)
    assert len(rows) == 2 and all(r["loss"] is not None for r in rows)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--no-prepend-start", "--max-length", "16"], ["prepend_start: True before, now False", "max_length"]),
        (["--dtype", "bf16"], ["dtype: None before, now 'bf16'"]),
        (["--k", "0.5,1.0"], ["cannot resume with other methods"]),
        (["--max-words", "5"], ["rows 1-5 of", "differ from those"]),
    ],
)
def test_resume_refuses_other_settings_naming_them(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch, options, named
):
    out = tmp_path / "o.jsonl"
    run = score(labelled_jsonl, tiny_model_dir, out, "--block-rows", "5")
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=2)
        refused(capsys, *run)
    line = refused(capsys, *run, "--resume", *options, keep=[tmp_path])
    assert all(part in line for part in named), line


def test_resume_refuses_another_model_behind_the_same_path(tiny_model_dir, tiny_eos_only_model_dir, tmp_path, capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": f"the quick brown fox {i}"} for i in range(12)])
    out = tmp_path / "o.jsonl"
    assert run_cli(*score(data, model, out, "--block-rows", "4")) == 0
    data.write_text(data.read_text() + json.dumps({"id": 12, "text": "one more row"}) + "\n")
    shutil.rmtree(model)
    shutil.copytree(tiny_eos_only_model_dir, model)
    line = refused(capsys, *score(data, model, out, "--block-rows", "4"), "--resume", keep=[tmp_path])
    assert "scored with another target model setting" in line and "weights:" in line


def test_resume_refuses_a_tampered_manifest_or_output(scored, tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    manifest = manifest_path(scored)
    original = manifest.read_text()
    manifest.write_text(original.replace('"prepend_start": true', '"prepend_start": false'))
    assert "checksum mismatch" in refused(
        capsys, *score(labelled_jsonl, tiny_model_dir, scored), "--resume", keep=[tmp_path]
    )
    manifest.write_text(original)
    with open(scored, "a") as f:
        f.write('{"id": "forged"}\n')
    assert "changed after it was written" in refused(
        capsys, *score(labelled_jsonl, tiny_model_dir, scored), "--resume", keep=[tmp_path]
    )
    manifest.unlink()
    assert "has no manifest beside it" in refused(
        capsys, *score(labelled_jsonl, tiny_model_dir, scored), "--resume", keep=[tmp_path]
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_full_disk_at_a_random_block_then_resume_equals_an_uninterrupted_run(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch, suffix
):
    uninterrupted = tmp_path / f"u{suffix}"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, uninterrupted, "--block-rows", "3")) == 0
    for seed in range(3):
        block = random.Random(f"{suffix}{seed}").randrange(8)
        out = tmp_path / f"o{seed}{suffix}"
        run = score(labelled_jsonl, tiny_model_dir, out, "--block-rows", "3")
        with monkeypatch.context() as patched:
            fail_writes(patched, from_block=block)
            line = refused(capsys, *run, keep=[uninterrupted])
        assert "No space left on device" in line and not out.exists()
        assert run_cli(*run, "--resume") == 0
        if suffix == ".parquet":
            assert pq.read_table(out).equals(pq.read_table(uninterrupted))
        else:
            assert out.read_bytes() == uninterrupted.read_bytes(), f"block {block}"
        assert not stage_path(out).exists()


def test_overwrite_keeps_the_old_output_until_the_new_one_is_complete(
    scored, tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    before = digests(scored, manifest_path(scored))
    run = score(labelled_jsonl, tiny_model_dir, scored, "--block-rows", "5", "--overwrite", "--no-prepend-start")
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=2)
        assert "the 10 rows finished are kept" in refused(capsys, *run)
    assert digests(scored, manifest_path(scored)) == before
    assert "interrupted run; pass --resume" in refused(capsys, *score(labelled_jsonl, tiny_model_dir, scored))
    assert run_cli(*run[:-2], "--resume", "--no-prepend-start") == 0
    assert digests(scored) != {k: v for k, v in before.items() if k == str(scored)}
    assert not stage_path(scored).exists()


def test_online_windows_resume_with_their_scores(tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch):
    online = ["--online", "4", "--block-rows", "5"]
    uninterrupted = tmp_path / "u.jsonl"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, uninterrupted), *online) == 0
    out = tmp_path / "o.jsonl"
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=5)  # the windows of block 3 are written, its scores are not
        refused(capsys, *score(labelled_jsonl, tiny_model_dir, out), *online)
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, out), *online, "--resume") == 0
    assert out.read_bytes() == uninterrupted.read_bytes()
    assert (tmp_path / "o.windows.jsonl").read_bytes() == (tmp_path / "u.windows.jsonl").read_bytes()


def test_a_second_writer_is_refused_naming_the_first(tiny_model_dir, tmp_path, capsys):
    rows = [{"id": i, "text": f"the quick brown fox number {i} jumps"} for i in range(1500)]
    data = write_jsonl(tmp_path / "many.jsonl", rows)
    out = tmp_path / "o.jsonl"
    command = [sys.executable, "-m", "mia_fast.cli", *map(str, score(data, tiny_model_dir, out, "--block-rows", "20"))]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    staged = stage_path(out) / "rows.jsonl"
    wait_until(lambda: rows_in(staged) > 0, "the first block was staged", first)
    line = refused(capsys, *score(data, tiny_model_dir, out, "--block-rows", "20"), "--resume")
    assert f"is being written by process {first.pid}" in line
    assert first.wait(timeout=300) == 0, first.stderr.read()
    alone = tmp_path / "alone.jsonl"
    assert run_cli(*score(data, tiny_model_dir, alone, "--block-rows", "20")) == 0
    assert out.read_bytes() == alone.read_bytes()
    assert not (tmp_path / "o.jsonl.lock").exists()


def test_the_lock_names_its_holder_and_goes_with_it(tmp_path):
    target = tmp_path / "o.jsonl"
    with OutputLock(target):
        with pytest.raises(MiaFastError, match=f"being written by process {os.getpid()}"):
            OutputLock(target).acquire()
    assert not (tmp_path / "o.jsonl.lock").exists()
    with OutputLock(target):
        pass


def test_a_completion_cut_short_between_its_renames_is_finished_by_the_next_run(tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    writer = ResultWriter(out, ["id", "warning"])
    writer.write([{"id": 1, "warning": None}])
    real_replace = os.replace

    def crash_on_manifest(source, target):
        if str(target).endswith(".manifest.json"):
            raise KeyboardInterrupt
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", crash_on_manifest)
    with pytest.raises(KeyboardInterrupt):
        writer.close()
    monkeypatch.setattr(os, "replace", real_replace)
    assert out.exists() and stage_path(out).exists()
    resumed = ResultWriter(out, ["id", "warning"], resume=True)
    assert resumed.complete and resumed.done_rows == 1 and not stage_path(out).exists()
    assert manifest_path(out).exists()


def test_a_full_disk_in_eval_is_one_line_and_keeps_what_was_written(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    report = tmp_path / "report"
    run = ["eval", labelled_jsonl, "--model", tiny_model_dir, "--report", report, "--bootstrap", "20", *FAST]
    assert run_cli(*run) == 0
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=0)
        line = refused(capsys, *run, "--out", tmp_path / "other.jsonl", "--overwrite", keep=[tmp_path])
    assert "No space left on device; nothing was written" in line

    def disk_full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("mia_fast.evaluation.report.plot_roc", disk_full)
    before = digests(report)
    line = refused(capsys, *run, "--out", tmp_path / "again.jsonl", "--overwrite")
    assert f"cannot write {report / 'roc.png'}: No space left on device; no report was written" in line
    assert digests(report) == before and len(read_jsonl(tmp_path / "again.jsonl")) == 24


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_a_run_killed_while_making_its_stage_leaves_none(tiny_model_dir, labelled_jsonl, tmp_path, monkeypatch, suffix):
    """A stage appears whole, with its manifest (a temporary folder renamed into place): a run killed while making it
    leaves nothing, and the rerun needs no flag. (A stage without a manifest is not ours: tests/faults/
    test_output_gate.py.)"""
    out = tmp_path / f"scores{suffix}"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr("mia_fast.data.outputs.write_checked_json", killed)
        assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, out)) == 0
    assert out.exists() and not stage_path(out).exists() and manifest_path(out).exists()


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_every_file_of_an_output_and_its_cache_has_the_mode_a_plain_open_gives(mask, tiny_model_dir, tmp_path):
    """Manifests, settings and run files were written 0600 (a temporary file's mode, renamed), shards and scores
    0644: another user who could read the rest was refused their metadata."""
    previous = os.umask(mask)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", [{"text": f"the quick brown fox number {i}"} for i in range(6)])
        cache = tmp_path / "cache"
        assert run_cli(*score(data, tiny_model_dir, tmp_path / "o.jsonl"), "--stats-cache", cache) == 0
    finally:
        os.umask(previous)
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.rglob("*")}
    files = {name: mode for name, mode in modes.items() if (tmp_path / name).is_file()}
    assert len(files) > 4 and set(files.values()) == {oct(0o666 & ~mask)}, files
