"""The output gate every writing command passes before any work (``mia_fast.data.gate``): no output is an input
(through links), a folder is not taken for a file nor the reverse, a dangling link is a path that exists, a report
folder that holds files needs --overwrite, and side files without the tool's mark are refused, never truncated or
deleted. Each refusal is one line, and every file that was there is byte-identical after (``refused``)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import FAST, read_jsonl, refused, run_cli, write_jsonl

from mia_fast.data.artefacts import LOCK_MARK, OutputLock
from mia_fast.data.outputs import ResultWriter
from mia_fast.errors import MiaFastError


@pytest.fixture
def work(tmp_path, labelled_jsonl):
    """A folder with the labelled texts (data.jsonl), a threshold, a frequency table and its corpus."""
    data = tmp_path / "data.jsonl"
    data.write_bytes(labelled_jsonl.read_bytes())
    write_jsonl(tmp_path / "corpus" / "c.jsonl", [{"text": f"corpus text number {i} of many"} for i in range(30)])
    return tmp_path


@pytest.fixture
def threshold(work, tiny_model_dir):
    path = work / "threshold.json"
    assert run_cli(*calibrate(work, tiny_model_dir, path)) == 0
    return path


@pytest.fixture
def table(work, tiny_model_dir):
    path = work / "c.freq"
    assert run_cli(*freq_build(work / "corpus", tiny_model_dir, path)) == 0
    return path


def score(work, model, out, *extra):
    return ["score", work / "data.jsonl", "--model", model, "--out", out, *FAST, *extra]


def freq_build(sources, model, out, *extra):
    return ["freq", "build", sources, "--tokenizer", model, "--out", out, "--quiet", *extra]


def calibrate(work, model, out, *extra):
    return ["calibrate", work / "data.jsonl", "--model", model, "--method", "loss", "--out", out, "--quiet", *extra]


# ---- an output is never an input --------------------------------------------------------------------------------


def test_calibrate_never_writes_over_its_data(work, tiny_model_dir, capsys):
    data = work / "data.jsonl"
    line = refused(capsys, *calibrate(work, tiny_model_dir, data, "--overwrite"), keep=[work])
    assert f"--out {data} is the input {data}" in line and "choose another --out" in line


def test_classify_never_writes_over_its_threshold(work, tiny_model_dir, threshold, capsys):
    for out in (threshold, work / "link.json"):
        if out.name == "link.json":
            out.symlink_to(threshold)
        line = refused(
            capsys,
            "classify",
            work / "data.jsonl",
            "--model",
            tiny_model_dir,
            "--threshold",
            threshold,
            "--out",
            out,
            "--overwrite",
            "--quiet",
            keep=[work],
        )
        assert "is the input" in line and str(threshold) in line


def test_freq_build_never_writes_over_its_corpus(work, tiny_model_dir, capsys):
    corpus = work / "corpus" / "c.jsonl"
    line = refused(capsys, *freq_build(corpus, tiny_model_dir, corpus, "--overwrite"), keep=[work])
    assert "is the input" in line
    # A file inside a corpus folder given whole is one of its inputs too.
    line = refused(capsys, *freq_build(work / "corpus", tiny_model_dir, corpus, "--overwrite"), keep=[work])
    assert f"would replace {corpus}, inside the input folder {work / 'corpus'}" in line


def test_freq_merge_never_writes_over_a_table_it_adds(work, table, capsys):
    other = work / "other.freq"
    other.write_bytes(table.read_bytes())
    line = refused(capsys, "freq", "merge", table, other, "--out", table, "--overwrite", keep=[work])
    assert f"--out {table} is the input {table}" in line


def test_a_report_folder_holding_the_input_is_refused(work, tiny_model_dir, capsys):
    line = refused(
        capsys,
        "eval",
        work / "data.jsonl",
        "--model",
        tiny_model_dir,
        "--report",
        work,
        "--overwrite",
        *FAST,
        keep=[work],
    )
    assert "holds the input" in line


def test_eval_scores_never_replace_the_input(work, tiny_model_dir, capsys):
    report = work / "report"
    data = work / "data.jsonl"
    line = refused(
        capsys,
        "eval",
        data,
        "--model",
        tiny_model_dir,
        "--report",
        report,
        "--out",
        data,
        "--overwrite",
        *FAST,
        keep=[work],
    )
    assert "is the input" in line
    assert not report.exists()


def test_a_side_file_that_is_the_input_is_refused(work, tiny_model_dir, capsys):
    """--out chosen so that its manifest would be written over the data file."""
    data = work / "x.jsonl.manifest.json"
    data.write_bytes((work / "data.jsonl").read_bytes())
    line = refused(
        capsys, "score", data, "--model", tiny_model_dir, "--out", work / "x.jsonl", *FAST, "--overwrite", keep=[work]
    )
    assert "its manifest" in line and "is the input" in line


# ---- kinds and dangling links -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [[], ["--overwrite"]])
def test_a_folder_where_a_file_is_expected_is_refused_before_any_work(work, tiny_model_dir, capsys, flags):
    folder = work / "out.jsonl"
    folder.mkdir()
    line = refused(capsys, *score(work, tiny_model_dir, folder), *flags, keep=[work])
    assert "is a folder; --out names a file" in line
    line = refused(capsys, *calibrate(work, tiny_model_dir, folder, *flags), keep=[work])
    assert "is a folder" in line


@pytest.mark.parametrize("command", ["eval", "demo", "probe", "dataset-inference", "audit-unlearning"])
def test_a_file_where_a_folder_is_expected_is_refused(work, tiny_model_dir, capsys, command):
    report = work / "notes.txt"
    report.write_text("my notes\n")
    data = work / "data.jsonl"
    argv = {
        "eval": ["eval", data, "--model", tiny_model_dir, "--report", report, *FAST],
        "demo": ["demo", "--model", tiny_model_dir, "--report", report, "--quiet"],
        "probe": ["probe", "train", "--train", data, "--dev", data, "--model", tiny_model_dir, "--out", report],
        "dataset-inference": [
            "dataset-inference",
            data,
            work / "corpus" / "c.jsonl",
            "--model",
            tiny_model_dir,
            "--report",
            report,
            "--quiet",
        ],
        "audit-unlearning": [
            "audit-unlearning",
            data,
            "--before",
            tiny_model_dir,
            "--after",
            tiny_model_dir,
            "--method",
            "loss",
            "--report",
            report,
            "--quiet",
        ],
    }[command]
    line = refused(capsys, *argv, "--overwrite", keep=[work])
    assert "is a file;" in line and "names a folder" in line


def test_a_dangling_link_is_a_path_that_exists(work, tiny_model_dir, capsys):
    out = work / "scores.jsonl"
    out.symlink_to(work / "gone.jsonl")
    line = refused(capsys, *score(work, tiny_model_dir, out), keep=[work])
    assert "is a link to nothing" in line and "--overwrite" in line
    assert out.is_symlink()
    line = refused(capsys, *calibrate(work, tiny_model_dir, out), keep=[work])
    assert "link to nothing" in line
    # With --overwrite the link itself is replaced; what it pointed at (nothing) is not created.
    assert run_cli(*score(work, tiny_model_dir, out), "--overwrite") == 0
    assert not out.is_symlink() and len(read_jsonl(out)) == 24 and not (work / "gone.jsonl").exists()


# ---- report folders ---------------------------------------------------------------------------------------------


def test_eval_refuses_a_report_folder_with_the_users_files(work, tiny_model_dir, capsys):
    report = work / "report"
    report.mkdir()
    (report / "metrics.json").write_text('{"mine": true}\n')
    (report / "report.md").write_text("# my own report\n")
    line = refused(
        capsys, "eval", work / "data.jsonl", "--model", tiny_model_dir, "--report", report, *FAST, keep=[work]
    )
    assert f"--report {report} is not empty; pass --overwrite" in line


def test_eval_reruns_into_its_own_report_with_overwrite_or_resume(work, tiny_model_dir, capsys):
    report = work / "report"
    args = ["eval", work / "data.jsonl", "--model", tiny_model_dir, "--report", report, *FAST, "--bootstrap", "50"]
    assert run_cli(*args) == 0
    assert "not empty" in refused(capsys, *args, keep=[work])
    assert run_cli(*args, "--resume") == 0
    assert run_cli(*args, "--overwrite") == 0


# ---- side files without the tool's mark ---------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
def test_a_users_lock_file_is_never_truncated_or_deleted(work, tiny_model_dir, capsys, flags):
    out = work / "scores.jsonl"
    (work / "scores.jsonl.lock").write_text("my shopping list\n")
    line = refused(capsys, *score(work, tiny_model_dir, out), *flags, keep=[work])
    assert "scores.jsonl.lock is not a lock of mia-fast" in line and "left as it is" in line


def test_the_library_lock_refuses_a_users_file_too(tmp_path):
    (tmp_path / "out.jsonl.lock").write_text("mine\n")
    with pytest.raises(MiaFastError, match="not a lock of mia-fast"):
        OutputLock(tmp_path / "out.jsonl").acquire()
    assert (tmp_path / "out.jsonl.lock").read_text() == "mine\n"


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    lock = tmp_path / "out.jsonl.lock"
    lock.write_text(f"{LOCK_MARK}\n999999\n")
    with OutputLock(tmp_path / "out.jsonl") as held:
        assert lock.read_text().splitlines() == [LOCK_MARK, str(os.getpid())]
        assert held.path == lock
    assert not lock.exists()


@pytest.mark.parametrize("flags", [["--overwrite"], ["--resume"], []])
def test_a_users_partial_folder_is_never_deleted(work, tiny_model_dir, capsys, flags):
    out = work / "scores.jsonl"
    stage = work / "scores.jsonl.partial"
    stage.mkdir()
    (stage / "thesis.tex").write_text("chapter one\n")
    line = refused(capsys, *score(work, tiny_model_dir, out), *flags, keep=[work])
    assert "scores.jsonl.partial" in line and "left as it is" in line
    assert (stage / "thesis.tex").read_text() == "chapter one\n"


def test_a_users_file_inside_a_real_stage_is_never_deleted(work, tiny_model_dir, capsys):
    out = work / "scores.jsonl"
    writer = ResultWriter(out, ["id", "loss"])
    writer.write([{"id": 1, "loss": 0.5}])
    writer.abandon()
    (work / "scores.jsonl.partial" / "notes.txt").write_text("mine\n")
    line = refused(capsys, *score(work, tiny_model_dir, out), "--overwrite", keep=[work])
    assert "holds files mia-fast did not write (notes.txt)" in line


def test_a_users_manifest_beside_the_output_is_refused(work, tiny_model_dir, capsys):
    out = work / "scores.jsonl"
    (work / "scores.jsonl.manifest.json").write_text(json.dumps({"my": "settings"}))
    line = refused(capsys, *score(work, tiny_model_dir, out), keep=[work])
    assert "is not a manifest of mia-fast" in line


def test_freq_build_never_deletes_a_users_partial_folder(work, tiny_model_dir, capsys):
    out = work / "t.freq"
    partial = work / "t.freq.partial"
    partial.mkdir()
    (partial / "keep.txt").write_text("mine\n")
    for flags in ([], ["--overwrite"]):
        line = refused(capsys, *freq_build(work / "corpus", tiny_model_dir, out, *flags), keep=[work])
        assert "t.freq.partial is not a checkpoint folder of mia-fast" in line


def test_a_users_shards_folder_is_never_deleted_by_a_ray_rerun(tmp_path):
    from mia_fast.cluster.shards import RayManifest

    out = tmp_path / "scores.parquet"
    shards = tmp_path / "scores.parquet.shards"
    shards.mkdir()
    (shards / "mine.parquet").write_bytes(b"my own data")
    for resume, overwrite in ((False, True), (False, False), (True, False)):
        with pytest.raises(MiaFastError, match="is not the shards folder of a --ray run"):
            RayManifest(shards, {}, resume=resume, overwrite=overwrite, out=out)
        assert (shards / "mine.parquet").read_bytes() == b"my own data"
