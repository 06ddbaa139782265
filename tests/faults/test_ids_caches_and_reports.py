"""Faults at the ends of a run: ids no one type holds, a stats cache on a full disk, a report on a full disk, two
runs writing one report. A scores file's id column gets its type from every id before any row is scored (never a
failure at the end, with the work stranded in its stage); a cache that cannot be written is left alone, said once;
a report appears whole or not at all, and one run at a time writes it."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import FAST, fail_writes, read_jsonl, refused, rows_in, run_cli, wait_until, write_jsonl

from mia_fast.data.outputs import stage_path

MIXED = [1, "1", 2.5, None, True, {"a": 1}]


def score(data, model, out, *extra):
    return ["score", data, "--model", model, "--out", out, *FAST, *extra]


def with_ids(path, ids):
    return write_jsonl(path, [{"id": x, "text": f"the quick brown fox number {i} jumps"} for i, x in enumerate(ids)])


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("mia-fast: warning: ")]


def parquet_ids(path):
    table = pq.read_table(path)
    return table.schema.field("id").type, table.column("id").to_pylist()


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        (MIXED, ["1", "1", "2.5", None, "true", '{"a": 1}']),
        ([1, 2, 3, 4.5], ["1", "2", "3", "4.5"]),  # were 1.0, 2.0, 3.0, 4.5
        ([1, 2, 3, 4, 5, 6, "seven", "eight"], ["1", "2", "3", "4", "5", "6", "seven", "eight"]),
    ],
    ids=["six-kinds", "ints-and-a-float", "ints-then-strings-after-a-conversion-chunk"],
)
def test_ids_no_one_type_holds_are_text_said_once_before_scoring(
    ids, text, tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """Ints in the first conversion chunk and strings after once gave 'Unable to merge' at the end; six kinds of id
    gave ArrowInvalid; both after every row was scored, the work left in o.parquet.partial/."""
    monkeypatch.setattr("mia_fast.data.formats.PARQUET_CONVERSION_ROWS", 4)
    data = with_ids(tmp_path / "d.jsonl", ids)
    out = tmp_path / "o.parquet"
    capsys.readouterr()
    assert run_cli(*score(data, tiny_model_dir, out, "--block-rows", "2")) == 0
    warned = [line for line in warnings_in(capsys.readouterr().err) if "no one type holds" in line]
    assert len(warned) == 1 and "'id' column is written as text" in warned[0] and "at line 1" in warned[0]
    assert parquet_ids(out) == (pa.string(), text)
    assert not stage_path(out).exists()
    jsonl = tmp_path / "o.jsonl"
    assert run_cli(*score(data, tiny_model_dir, jsonl)) == 0
    assert [row["id"] for row in read_jsonl(jsonl)] == text


def test_ids_of_one_type_keep_it(tiny_model_dir, tmp_path, capsys):
    for ids, kind in [([3, 1, None, 2**40], pa.int64()), ([0.5, 1.0], pa.float64()), ([True, False], pa.bool_())]:
        data = with_ids(tmp_path / "d.jsonl", ids)
        out = tmp_path / "o.parquet"
        capsys.readouterr()
        assert run_cli(*score(data, tiny_model_dir, out, "--overwrite")) == 0
        assert not [line for line in warnings_in(capsys.readouterr().err) if "no one type holds" in line]
        assert parquet_ids(out) == (kind, ids)


def test_a_run_of_mixed_ids_stopped_by_a_full_disk_resumes_to_the_uninterrupted_output(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    data = with_ids(tmp_path / "d.jsonl", MIXED * 2)
    out, alone = tmp_path / "o.parquet", tmp_path / "alone.parquet"
    capsys.readouterr()
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=2)
        assert run_cli(*score(data, tiny_model_dir, out, "--block-rows", "3")) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mia-fast: error: ")]
    assert len(errors) == 1 and "the 6 rows finished are kept: continue with --resume" in errors[0]
    assert stage_path(out).is_dir() and not out.exists()
    assert run_cli(*score(data, tiny_model_dir, out, "--block-rows", "3", "--resume")) == 0
    assert run_cli(*score(data, tiny_model_dir, alone, "--block-rows", "3")) == 0
    assert pq.read_table(out).equals(pq.read_table(alone))
    assert parquet_ids(out)[1][:6] == ["1", "1", "2.5", None, "true", '{"a": 1}']


def a_full_disk_for_cache_shards(monkeypatch) -> list[int]:
    """Makes every stats-cache shard hit a full disk half-way through, as pyarrow reports it (an OSError that names
    no file); returns the count of shards tried."""
    real = pa.ipc.new_file
    tried = []

    def new_file(sink, schema):
        tried.append(1)
        sink.write(b"ARROW1\0\0" * 64)
        real(sink, schema)  # pyarrow writes a schema before any batch
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pa.ipc, "new_file", new_file)
    return tried


def test_a_stats_cache_on_a_full_disk_is_said_once_and_the_run_goes_on(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    cache, out, plain = tmp_path / "cache", tmp_path / "o.jsonl", tmp_path / "plain.jsonl"
    assert run_cli(*score(labelled_jsonl, tiny_model_dir, plain, "--block-rows", "4")) == 0
    capsys.readouterr()
    with monkeypatch.context() as patched:
        tried = a_full_disk_for_cache_shards(patched)
        assert run_cli(*score(labelled_jsonl, tiny_model_dir, out, "--block-rows", "4", "--stats-cache", cache)) == 0
    warned = [line for line in warnings_in(capsys.readouterr().err) if "stats cache" in line]
    assert warned == [
        f"mia-fast: warning: stats cache {cache}: cannot be written (Error writing bytes to file. Detail: [errno 28] "
        "No space left on device); the run goes on without it, and texts it does not hold are not added"
    ]
    assert tried == [1]  # not once per block
    assert not [p.name for p in cache.rglob("*") if p.name.endswith(".tmp") or p.suffix == ".arrow"]
    assert out.read_bytes() == plain.read_bytes()


@pytest.fixture
def eval_run(tiny_model_dir, labelled_jsonl, tmp_path):
    report = tmp_path / "report"
    run = ["eval", labelled_jsonl, "--model", tiny_model_dir, "--report", report, "--bootstrap", "20", *FAST]
    assert run_cli(*run) == 0
    return report, run


@pytest.mark.parametrize("written", ["metrics.json", "roc.png", "histograms.png", "report.html"])
def test_a_report_on_a_full_disk_is_one_line_naming_the_file_and_no_half_report(
    written, eval_run, tmp_path, capsys, monkeypatch
):
    report, run = eval_run
    real_write_text = Path.write_text

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as matplotlib's write to an open file: no name

    def write_text(path, data, *args, **kwargs):
        if path.name != written:
            return real_write_text(path, data, *args, **kwargs)
        real_write_text(path, data[: len(data) // 2], *args, **kwargs)
        return disk_full()

    if written.endswith(".png"):
        monkeypatch.setattr(f"mia_fast.evaluation.report.plot_{written[:-4]}", disk_full)
    monkeypatch.setattr(Path, "write_text", write_text)
    line = refused(capsys, *run, "--out", tmp_path / "again.jsonl", "--bootstrap", "30", "--overwrite", keep=[report])
    assert line.startswith(f"mia-fast: error: cannot write {report / written}: No space left on device; ")
    assert sorted(p.name for p in report.iterdir() if p.name.startswith(".")) == []


def test_a_report_folder_made_for_a_report_that_fails_is_removed(
    tiny_model_dir, labelled_jsonl, tmp_path, capsys, monkeypatch
):
    report = tmp_path / "new-report"

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("mia_fast.evaluation.report.plot_roc", disk_full)
    out = tmp_path / "s.jsonl"
    line = refused(capsys, "eval", labelled_jsonl, "--model", tiny_model_dir, "--report", report, "--out", out, *FAST)
    assert f"cannot write {report / 'roc.png'}" in line
    assert not report.exists()


def test_a_second_eval_writing_a_report_folder_is_refused_naming_the_first(tiny_model_dir, tmp_path, capsys):
    data = write_jsonl(
        tmp_path / "many.jsonl",
        [{"id": i, "text": f"the quick brown fox number {i} jumps", "label": i % 2} for i in range(1500)],
    )
    report = tmp_path / "rep"
    first_run = ["eval", data, "--model", tiny_model_dir, "--report", report, "--bootstrap", "20", *FAST]
    command = [sys.executable, "-m", "mia_fast.cli", *map(str, first_run), "--block-rows", "20"]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: rows_in(report / "scores.jsonl.partial" / "rows.jsonl") > 0, "the first block was staged", first)
    second = ["eval", data, "--model", tiny_model_dir, "--report", report, "--out", tmp_path / "other.jsonl"]
    line = refused(capsys, *second, "--bootstrap", "20", *FAST, "--overwrite", keep=[tmp_path / "many.jsonl"])
    assert f"{report} is being written by process {first.pid}" in line
    assert not (tmp_path / "other.jsonl").exists()
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert json.loads((report / "metrics.json").read_text())["methods"]
    assert not (tmp_path / "rep.lock").exists()
