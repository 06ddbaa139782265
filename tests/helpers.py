"""Helpers shared by tests of several stages: running the CLI, counting forwards, hand-built stats."""

import dataclasses
import errno
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

from mia_fast.cli import main
from mia_fast.pipeline.stats import TokenStats

FAST = ["--methods", "loss,zlib,mink,minkpp", "--k", "0.2,1.0", "--quiet"]
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def script(name: str):
    """``scripts/NAME.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_cli(*args):
    return main([str(a) for a in args])


def fail(capsys, *args) -> str:
    """Runs the CLI expecting a clean failure; returns its one-line error."""
    assert run_cli(*args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mia-fast: error: ")
    return err[-1]


def digests(*places) -> dict[str, str]:
    """The SHA-256 of every file under (or at) each place, by path."""
    found = {}
    for place in map(Path, places):
        files = sorted(p for p in place.rglob("*") if p.is_file()) if place.is_dir() else [place] * place.is_file()
        found.update({str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files})
    return found


def refused(capsys, *args, keep=()) -> str:
    """Runs the CLI expecting it to refuse: exit 2, exactly one line on stderr, and every file under ``keep``
    (directories or files) byte-identical after, none added or removed. Returns the line."""
    before = digests(*keep)
    capsys.readouterr()
    code = run_cli(*args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, f"exit {code}; stderr: {err}"
    assert len(err) == 1 and err[0].startswith("mia-fast: error: "), err
    after = digests(*keep)
    assert after == before, {
        path: (before.get(path), after.get(path)) for path in {*before, *after} if before.get(path) != after.get(path)
    }
    return err[0]


def fail_writes(monkeypatch, from_block: int) -> None:
    """Makes the disk fill up while scores block ``from_block`` (0-based, counted over every staged rows file) is
    written: half of it reaches the file, then ENOSPC, as it does for every later write."""
    real_write = os.write
    blocks = [0]

    def write(fd, data):
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if target.name not in ("rows.jsonl", "rows.csv") or not target.parent.name.endswith(".partial"):
            return real_write(fd, data)
        if blocks[0] >= from_block:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        blocks[0] += 1
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


PREFIX = ["the rain in spain ", "all that glitters"]


MEMBER_PREFIX = ["once upon ", "a time"]


def count_forwards(engine) -> list[int]:
    """Forward batches of TokenStats the engine runs (packed or padded)."""
    return _count(engine, lambda rows: 1)


def count_sequences(engine) -> list[int]:
    """Sequences (batch rows) the engine's model runs on for TokenStats."""
    return _count(engine, len)


def _count(engine, measure) -> list[int]:
    total = [0]
    run_batch = engine._run_batch

    def counted(rows):
        total[0] += measure(rows)
        return run_batch(rows)

    engine._run_batch = counted
    return total


def stats_of(*texts: list[float]) -> TokenStats:
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.arange(len(t)),
                "logp": np.array(t, np.float32),
                "mu": np.zeros(len(t), np.float32),
                "var": np.ones(len(t), np.float32),
            }
            for t in texts
        ]
    )


def recomputing_prefixes(engine):
    """``engine`` running each row's prefix inside the row, as every pass with a prefix ran before prefixes were
    computed once: the path a shared prefix must agree with."""
    run_batch = engine._run_batch
    engine._run_batch = lambda rows: run_batch([dataclasses.replace(row, context=0) for row in rows])
    return engine
