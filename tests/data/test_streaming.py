"""Streaming input: data files read block by block from any row (seeking where the format allows), scored in
constant memory with reading and writing on their own threads, with the same output as in memory."""

from __future__ import annotations

import csv
import gzip
import json
import random
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import digests, fail_writes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mia_fast import ComputeConfig, Detector, OutputConfig, RunConfig, ScoringConfig, score_file
from mia_fast.data import DataStream, read_dataset
from mia_fast.data.files import cut_to_words, iter_rows, row_positions
from mia_fast.data.outputs import ResultWriter
from mia_fast.errors import MiaFastError
from mia_fast.scoring import runner as runner_module

WORDS = "the quick brown fox jumps over a lazy dog while rain falls on spain".split()


def make_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"id": f"r{i}", "text": " ".join(rng.choices(WORDS, k=rng.randint(0, 12))), "label": i % 2}
        for i in range(count)
    ]


def write_input(path, rows: list[dict]):
    """Writes rows in the format of ``path``'s suffix, with traps: blank lines in .jsonl, a quoted field across
    lines and a blank line in .csv, several row groups in .parquet."""
    name = path.name
    if name.endswith(".jsonl") or name.endswith(".jsonl.gz"):
        lines = "".join(json.dumps(r) + "\n" + ("\n" if i % 7 == 3 else "") for i, r in enumerate(rows))
        path.write_bytes(gzip.compress(lines.encode()) if name.endswith(".gz") else lines.encode())
    elif name.endswith(".csv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=["id", "text", "label"])
            writer.writeheader()
            for i, r in enumerate(rows):
                writer.writerow({**r, "text": r["text"].replace(" ", "\n", 1) if i % 5 == 2 else r["text"]})
                if i % 9 == 4:
                    f.write("\r\n")
    elif name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    else:
        path.write_text(json.dumps(rows))
    return path


FORMATS = ["jsonl", "jsonl.gz", "csv", "parquet", "json"]


@pytest.mark.parametrize("suffix", FORMATS)
def test_blocks_from_any_row_position_equal_the_whole_file(tmp_path, suffix):
    path = write_input(tmp_path / f"d.{suffix}", make_rows(40))
    whole = read_dataset(path)
    positions, total = row_positions(path, 6)
    assert total == 40 and [p.row for p in positions] == list(range(0, 40, 6))
    assert all((p.offset is not None) == (suffix in ("jsonl", "csv")) for p in positions)
    for position in positions:
        stream = DataStream(path).part(position, 6)
        blocks = [block for block, _ in stream.blocks(4)]
        assert [len(b.texts) for b in blocks] == ([4, 2] if position.row + 6 <= 40 else [4])
        expected = whole.rows(position.row, position.row + 6)
        assert sum((b.texts for b in blocks), []) == expected.texts
        assert sum((b.ids for b in blocks), []) == expected.ids
        assert sum((b.labels for b in blocks), []) == expected.labels
    numbers = [number for number, _, _ in iter_rows(path, positions[2])]
    assert numbers == [number for number, _, _ in iter_rows(path)][12:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(1, 30),
    block=st.integers(1, 9),
    every=st.integers(1, 9),
    suffix=st.sampled_from(["jsonl", "csv", "parquet"]),
)
def test_blocks_partition_the_file_whatever_the_sizes(tmp_path, rows, block, every, suffix):
    path = write_input(tmp_path / f"p{rows}-{block}-{every}.{suffix}", make_rows(rows, seed=rows))
    whole = read_dataset(path)
    texts = [
        t
        for p in row_positions(path, every)[0]
        for b, _ in DataStream(path).part(p, every).blocks(block)
        for t in b.texts
    ]
    assert texts == whole.texts
    ends = [end for _, end in DataStream(path).blocks(block)]
    assert ends == sorted(ends) and 0 < ends[-1] <= path.stat().st_size


def test_a_field_that_comes_or_goes_mid_stream_is_refused_with_its_line(tmp_path):
    rows = make_rows(10)
    del rows[7]["id"]
    path = write_input(tmp_path / "d.jsonl", rows)
    blocks = DataStream(path).blocks(3)
    assert len(next(blocks)[0].texts) == 3
    next(blocks)
    with pytest.raises(MiaFastError, match=r"line 9 has no 'id' field while other rows do"):
        next(blocks)
    rows = [{k: v for k, v in r.items() if k != "id" or i >= 8} for i, r in enumerate(make_rows(10))]
    path = write_input(tmp_path / "late.jsonl", rows)
    with pytest.raises(MiaFastError, match="line 10 has the 'id' field while earlier rows do not"):
        list(DataStream(path).blocks(5))


def test_empty_inputs_and_bad_positions_are_refused(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n\n")
    with pytest.raises(MiaFastError, match="holds no rows"):
        list(DataStream(tmp_path / "e.jsonl").blocks(4))
    with pytest.raises(MiaFastError, match="rows per shard must be positive"):
        row_positions(write_input(tmp_path / "d.jsonl", make_rows(3)), 0)
    with pytest.raises(MiaFastError, match="--max-words must be positive"):
        DataStream(tmp_path / "d.jsonl", max_words=0)


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


def test_parquet_output_columns_empty_at_first_take_their_later_type(tmp_path, monkeypatch):
    monkeypatch.setattr("mia_fast.data.formats.PARQUET_CONVERSION_ROWS", 3)
    writer = ResultWriter(tmp_path / "o.parquet", ["id", "score", "warning"])
    writer.write([{"id": i, "score": float(i), "warning": None} for i in range(5)])
    writer.write([{"id": 5, "score": float("nan"), "warning": "nothing to score"}])
    writer.close()
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.schema.field("warning").type == pa.string()
    assert table.column("warning").to_pylist() == [None] * 5 + ["nothing to score"]
    assert table.column("score").to_pylist()[:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
