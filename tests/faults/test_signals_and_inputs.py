"""A run stopped by SIGTERM unwinds as Ctrl-C does, and a build killed by SIGKILL leaves no worker process; inputs a
user sweep found mishandled: a CSV that starts with a byte-order mark, repeated ids and texts labelled both ways, a
named pipe (or a directory, socket or device) given as DATA, and numbers so large that a run would never end, which
every numeric option of every command refuses."""

from __future__ import annotations

import argparse
import codecs
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import (
    PROGRESS_CAP_S,
    child_processes,
    end_processes,
    processes_ended,
    read_jsonl,
    refused,
    run_cli,
    wait_until,
    write_jsonl,
)

from mia_fast.cli.main import build_parser
from mia_fast.data import read_dataset
from mia_fast.data.files import iter_rows, row_positions
from mia_fast.errors import MiaFastWarning

FAST = ["--methods", "loss,zlib", "--quiet"]
HUGE = str(10**12)


def score(data, model, out, *extra) -> int:
    return run_cli("score", data, "--model", model, "--out", out, *FAST, *extra)


def rows_of(count: int) -> list[dict]:
    return [{"id": f"r{i}", "text": f"the quick brown fox {i} jumps over the lazy dog {i * 7}"} for i in range(count)]


def test_sigterm_releases_the_lock_keeps_finished_blocks_and_resume_finishes(tiny_model_dir, tmp_path):
    data, out = write_jsonl(tmp_path / "d.jsonl", rows_of(60)), tmp_path / "o.jsonl"
    command = [sys.executable, "-m", "mia_fast.cli", "score", data, "--model", tiny_model_dir, "--out", out, *FAST]
    process = subprocess.Popen([*map(str, command), "--block-rows", "1"], stderr=subprocess.PIPE, text=True)
    manifest = tmp_path / "o.jsonl.partial" / "manifest.json"
    wait_until(manifest.exists, "the run wrote its manifest", process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=PROGRESS_CAP_S)
    assert process.returncode == 143, err
    assert err.strip().splitlines() == [
        "mia-fast: terminated (SIGTERM); finished work is kept (scores: continue with --resume)"
    ]
    assert not (tmp_path / "o.jsonl.lock").exists() and not out.exists()
    assert score(data, tiny_model_dir, out, "--block-rows", "1", "--resume") == 0
    fresh = tmp_path / "fresh.jsonl"
    assert score(data, tiny_model_dir, fresh) == 0
    resumed, whole = read_jsonl(out), read_jsonl(fresh)
    assert [r["id"] for r in resumed] == [r["id"] for r in whole] == [f"r{i}" for i in range(60)]
    for got, expected in zip(resumed, whole):
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert got["zlib"] == pytest.approx(expected["zlib"], rel=1e-5)


def spawned_workers(processes: set[tuple[int, int]]) -> int:
    """How many of ``processes`` are multiprocessing's spawned workers (once their Python has started)."""
    count = 0
    for pid, _ in processes:
        try:
            count += b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_build_killed_by_sigkill_leaves_no_worker_process(tiny_model_dir, tmp_path):
    workers, corpus = 6, tmp_path / "corpus"
    corpus.mkdir()
    for i in range(workers):  # a piece of work per worker
        write_jsonl(corpus / f"c{i}.jsonl", rows_of(50))
    command = [sys.executable, "-m", "mia_fast.cli", "freq", "build", corpus, "--tokenizer", tiny_model_dir]
    command += ["--out", tmp_path / "t.freq", "--workers", workers, "--quiet"]
    build = subprocess.Popen(list(map(str, command)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: set[tuple[int, int]] = set()

    def all_started() -> bool:
        children.update(child_processes(build.pid))
        return spawned_workers(children) == workers

    try:
        wait_until(all_started, f"the build started {workers} worker processes", build)
        build.send_signal(signal.SIGKILL)
        assert build.wait() == -signal.SIGKILL
        wait_until(lambda: processes_ended(children), "every process of the killed build ended (the tracker too)")
    finally:
        build.kill()
        end_processes(children)


def write_bom_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert path.read_bytes().startswith(codecs.BOM_UTF8)
    return path


def test_a_csv_with_a_byte_order_mark_keeps_its_id_column(tiny_model_dir, tmp_path):
    rows = [{**row, "label": i % 2} for i, row in enumerate(rows_of(5))]
    data, out = write_bom_csv(tmp_path / "d.csv", rows), tmp_path / "o.jsonl"
    assert score(data, tiny_model_dir, out) == 0
    assert [r["id"] for r in read_jsonl(out)] == [f"r{i}" for i in range(5)]


def test_resume_positions_of_a_csv_with_a_byte_order_mark_start_at_their_rows(tmp_path):
    rows = [{"id": "r0", "text": "a field\nover two lines"}, *rows_of(7)[1:]]
    data = write_bom_csv(tmp_path / "d.csv", rows)
    positions, count = row_positions(data, 3)
    assert count == 7 and [p.row for p in positions] == [0, 3, 6]
    for position in positions:
        read = [record["id"] for _, record, _ in iter_rows(data, position)]
        assert read == [f"r{i}" for i in range(position.row, 7)]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_json_inputs_with_a_byte_order_mark_are_read(tmp_path, suffix):
    rows = rows_of(3)
    body = json.dumps(rows) if suffix == ".json" else "".join(json.dumps(r) + "\n" for r in rows)
    data = tmp_path / f"d{suffix}"
    data.write_bytes(codecs.BOM_UTF8 + body.encode())
    assert read_dataset(data).ids == ["r0", "r1", "r2"]


def test_repeated_ids_are_one_warning_line(tiny_model_dir, tmp_path, capsys):
    rows = rows_of(8)
    for repeat, of in ((3, 0), (5, 0), (6, 1), (7, 2)):
        rows[repeat]["id"] = rows[of]["id"]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    capsys.readouterr()
    assert score(data, tiny_model_dir, tmp_path / "o.jsonl") == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [
        f"mia-fast: warning: {data}: 3 ids occur more than once (e.g. 'r0' on lines 1 and 4): rows are matched by "
        "position, not id"
    ]


def test_texts_labelled_both_ways_are_one_warning_line_in_eval(tiny_model_dir, tmp_path, capsys):
    rows = [{**row, "label": i % 2} for i, row in enumerate(rows_of(8))]
    rows.append({**rows[2], "id": "y", "label": 1})  # the text of line 3, a non-member, again as a member
    rows.append({**rows[5], "id": "x"})  # a plain repeat of line 6, with its label: no contradiction
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    capsys.readouterr()
    report = tmp_path / "report"
    assert run_cli("eval", data, "--model", tiny_model_dir, "--report", report, "--no-blind", *FAST) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [
        f"mia-fast: warning: {data}: 1 text is labelled both member and non-member (e.g. lines 3 and 9): their "
        "scores cannot separate them"
    ]


def test_read_dataset_warns_of_repeats_and_not_of_plain_duplicates(tmp_path):
    rows = [{"id": "a", "text": "t1", "label": 1}, {"id": "b", "text": "t2", "label": 0}]
    plain = write_jsonl(tmp_path / "plain.jsonl", rows + [{"id": "c", "text": "t1", "label": 1}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_dataset(plain)
    both = write_jsonl(tmp_path / "both.jsonl", rows + [{"id": "a", "text": "t2", "label": 1}])
    with pytest.warns(MiaFastWarning) as caught:
        read_dataset(both)
    assert [str(w.message).split(": ", 1)[1] for w in caught] == [
        "1 id occurs more than once (e.g. 'a' on lines 1 and 3): rows are matched by position, not id",
        "1 text is labelled both member and non-member (e.g. lines 2 and 3): their scores cannot separate them",
    ]


def never_blocking():
    """Fails the test instead of letting a read of a FIFO wait for a writer for ever."""

    def blocked(signum, frame):
        raise AssertionError("the FIFO was opened")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(60)
    return previous


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket", "device"])
def test_data_that_is_not_a_regular_file_is_named_for_what_it_is(kind, tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    if kind == "fifo":
        os.mkfifo(data)
    elif kind == "directory":
        data.mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(data))
    else:
        data.symlink_to(os.devnull)
    previous = never_blocking()
    try:
        line = refused(
            capsys, "score", data, "--model", tiny_model_dir, "--out", tmp_path / "o.jsonl", *FAST, keep=[tmp_path]
        )
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    expected = {
        "fifo": "is a named pipe (FIFO): mia-fast reads its input more than once",
        "directory": "is a directory, not a file of texts",
        "socket": "is a socket, not a file of texts",
        "device": "is a character device, not a file of texts",
    }[kind]
    assert f"{data} {expected}" in line and "no such file" not in line


def numeric_options(parser: argparse.ArgumentParser, command: str = "mia-fast"):
    """(command, option, parse) for every option of every command whose type parses numbers (or lists of them)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from numeric_options(subparser, f"{command} {name}")
        elif action.type is not None and action.option_strings and parses_numbers(action):
            yield command, action.option_strings[0], action


def parses_numbers(action: argparse.Action) -> bool:
    for probe in ("1", "8", "64", "0.5", "1000"):
        try:
            value = action.type(probe)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return False


def refuses(action: argparse.Action, text: str) -> bool:
    try:
        value = action.type(text)
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return True
    return action.choices is not None and value not in action.choices


def test_every_numeric_option_of_every_command_has_an_upper_bound():
    options = list(numeric_options(build_parser()))
    names = {option for _, option, _ in options}
    assert {"--bootstrap", "--seed", "--block-rows", "--max-length", "--lr", "--samia-samples", "--k"} <= names
    assert {"--vocab-size", "--workers", "--probe-epochs", "--online", "--in-flight", "--wbc-windows"} <= names
    unbounded = [f"{command} {option}" for command, option, action in options if not refuses(action, HUGE)]
    assert not unbounded, f"options that take {HUGE}: {unbounded}"


def test_a_huge_bootstrap_is_refused_as_it_is_parsed(tmp_path, capsys):
    line = refused(capsys, "eval", tmp_path / "d.jsonl", "--bootstrap", "1000000000", keep=[tmp_path])
    assert "argument --bootstrap: must be a whole number in [1, 100000], got '1000000000'" in line
