"""The file runner (scoring.runner): ``score_file`` scores a streamed file as the same file in memory, whatever the
thread timing, resumed after a failed write, and refused before anything is scored when a row is bad; a tiny jsonl
scored into a file holds the Detector's scores, row for row."""

from __future__ import annotations

import json
import random
import threading
import time

import pyarrow.parquet as pq
import pytest
from data.test_files import make_rows, write_input
from helpers import digests, fail_writes

from mia_fast import ComputeConfig, Detector, OutputConfig, RunConfig, ScoringConfig, score_file
from mia_fast.data import DataStream, read_dataset
from mia_fast.data.files import cut_to_words
from mia_fast.data.outputs import ResultWriter
from mia_fast.errors import MiaFastError
from mia_fast.scoring import runner as runner_module


@pytest.fixture(scope="module")
def detector(tiny_model_dir):
    return Detector(str(tiny_model_dir))


def run_config(out, scoring: ScoringConfig, block_rows: int, resume: bool = False, overlap: bool = True) -> RunConfig:
    """A run into ``out`` without a progress bar."""
    return RunConfig(
        OutputConfig(out, resume=resume, block_rows=block_rows),
        scoring=scoring,
        compute=ComputeConfig(progress=False, overlap=overlap),
    )


@pytest.mark.parametrize("out_suffix", ["jsonl", "parquet"])
@pytest.mark.parametrize("suffix", ["jsonl.gz", "csv", "parquet"])
def test_a_streamed_file_scores_as_the_same_file_in_memory(detector, tmp_path, suffix, out_suffix):
    path = write_input(tmp_path / f"d.{suffix}", make_rows(37))
    scoring = ScoringConfig(methods=["loss", "zlib", "mink"], k=[0.2])
    streamed = score_file(
        DataStream(path, max_words=8), run_config(tmp_path / f"streamed.{out_suffix}", scoring, 8), detector
    )
    in_memory = score_file(
        cut_to_words(read_dataset(path), 8),
        run_config(tmp_path / f"memory.{out_suffix}", scoring, 8, overlap=False),
        detector,
    )
    assert read_out(streamed) == read_out(in_memory)
    whole = detector.score([" ".join(t.split()[:8]) for t in read_dataset(path).texts], ["loss"])
    assert losses(read_out(streamed)) == pytest.approx(list(whole["loss"]), rel=1e-5, nan_ok=True)


def read_out(path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


def losses(rows: list[dict]) -> list[float]:
    return [float("nan") if r["loss"] is None else r["loss"] for r in rows]


def test_scores_do_not_depend_on_thread_timing(detector, tmp_path, monkeypatch):
    """Reading ahead and writing behind are slowed at random; the output is still the one-thread output."""
    path = write_input(tmp_path / "d.jsonl", make_rows(60, seed=3))
    scoring = ScoringConfig(methods=["loss", "minkpp"], k=[0.3])
    expected = read_out(
        score_file(DataStream(path), run_config(tmp_path / "sequential.jsonl", scoring, 7, overlap=False), detector)
    )
    rng = random.Random(0)
    threads = set()
    read_ahead, write = runner_module._read_ahead, ResultWriter.write

    def slow_read_ahead(*args):
        threads.add(threading.current_thread().name)
        time.sleep(rng.random() * 0.02)
        return read_ahead(*args)

    def slow_write(self, rows, fingerprints=None):
        threads.add(threading.current_thread().name)
        time.sleep(rng.random() * 0.02)
        write(self, rows, fingerprints)

    monkeypatch.setattr(runner_module, "_read_ahead", slow_read_ahead)
    monkeypatch.setattr(ResultWriter, "write", slow_write)
    for attempt in range(3):
        overlapped = score_file(
            DataStream(path), run_config(tmp_path / f"overlapped{attempt}.jsonl", scoring, 7), detector
        )
        assert read_out(overlapped) == expected
    assert threading.current_thread().name not in threads and len(threads) == 2


def test_resuming_a_stream_keeps_the_written_rows_and_checks_they_are_the_same(detector, tmp_path, monkeypatch):
    path = write_input(tmp_path / "d.csv", make_rows(30))
    scoring = ScoringConfig(methods=["loss"])
    full = read_out(score_file(DataStream(path), run_config(tmp_path / "full.jsonl", scoring, 4), detector))
    partial = tmp_path / "partial.jsonl"
    with monkeypatch.context() as patched, pytest.raises(MiaFastError, match="the 12 rows finished are kept"):
        fail_writes(patched, from_block=3)  # the disk fills up while rows 13-16 are written
        score_file(DataStream(path), run_config(partial, scoring, 4), detector)
    stage = digests(tmp_path / "partial.jsonl.partial")
    for changed in ("id", "text"):
        rows = make_rows(30)
        rows[5][changed] = "other"
        other = write_input(tmp_path / f"other-{changed}.csv", rows)
        with pytest.raises(MiaFastError, match="rows 5-8 of the input differ"):
            score_file(DataStream(other), run_config(partial, scoring, 4, resume=True), detector)
    short = write_input(tmp_path / "short.csv", make_rows(9))
    with pytest.raises(MiaFastError, match="holds 12 rows but the input only 9"):
        score_file(DataStream(short), run_config(partial, scoring, 4, resume=True), detector)
    assert digests(tmp_path / "partial.jsonl.partial") == stage
    notes = []
    score_file(DataStream(path), run_config(partial, scoring, 5, resume=True), detector, log=notes.append)
    resumed = read_out(partial)
    assert [r["id"] for r in resumed] == [r["id"] for r in full] and resumed[:12] == full[:12]
    assert losses(resumed) == pytest.approx(losses(full), rel=1e-6, nan_ok=True)
    assert "resuming" in notes[0] and "after 12 rows" in notes[0]


def test_a_bad_row_anywhere_in_a_stream_is_refused_before_anything_is_scored(detector, tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl"
    lines = [json.dumps(r) for r in make_rows(20)]
    lines[15] = '{"id": "r15", "text": "broken'
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "s.jsonl"
    monkeypatch.setattr(detector, "score_requests", None)  # never reached
    with pytest.raises(MiaFastError, match=r"d.jsonl:16: malformed JSON"):
        score_file(DataStream(path), run_config(out, ScoringConfig(methods=["loss"]), 5), detector)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl"]


def test_a_tiny_jsonl_is_scored_into_a_file_row_for_row(detector, tmp_path):
    rows = make_rows(9, seed=5)
    path = write_input(tmp_path / "d.jsonl", rows)
    out = score_file(DataStream(path), run_config(tmp_path / "s.jsonl", ScoringConfig(methods=["loss"]), 4), detector)
    written = read_out(out)
    expected = detector.score([r["text"] for r in rows], ["loss"])
    assert [list(r) for r in written] == [["id", "label", "n_tokens", "loss", "warning"]] * 9
    assert [r["id"] for r in written] == [r["id"] for r in rows] and [r["label"] for r in written] == [0, 1] * 4 + [0]
    assert [r["n_tokens"] for r in written] == expected.n_tokens.tolist()
    assert losses(written) == pytest.approx(list(expected["loss"]), rel=1e-6, nan_ok=True)
    assert [r["warning"] for r in written] == expected.warnings
