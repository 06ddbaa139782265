"""Start-up cost of the command line: ``mia-fast --help``, ``import mia_fast`` and ``mia-fast freq
build-tokens`` on a 100M-token uint16 file, against the in-process count of the same file and the
interpreter's own floor (``python -c pass``, ``import numpy``).

Every command runs as a fresh process, interleaved round by round; medians are reported. Give one or
more interpreters, each with the mia-fast to measure (e.g. this checkout's and an older commit's, to
compare before and after in one run). Writes ``results/startup-<cores>core.json``.

    python benchmarks/startup.py --interpreter after=.venv/bin/python [--interpreter before=../venv-before/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import RESULTS, machine

TOKENS = 100_000_000
VOCAB = 50257
IN_PROCESS = f"""
import statistics, sys, time
from mia_fast.frequency import Counting, build_from_tokens
times = []
for _ in range(int(sys.argv[2])):
    started = time.perf_counter()
    build_from_tokens([sys.argv[1]], Counting(vocab_size={VOCAB:d}), dtype="uint16")
    times.append(time.perf_counter() - started)
print(statistics.median(times))
"""


# As users run it: bytecode caches written once and reused (some sandboxes set PYTHONDONTWRITEBYTECODE).
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TRITON_INTERPRET")}


def wall(command: list[str], cwd: Path) -> float:
    """Seconds ``command`` takes, run from ``cwd`` (not the checkout, which ``python -m`` would put on sys.path)."""
    started = time.perf_counter()
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, cwd=cwd)
    seconds = time.perf_counter() - started
    if finished.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{finished.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--interpreter",
        action="append",
        required=True,
        metavar="LABEL=PYTHON",
        help="a python with mia-fast installed; repeat to compare",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", type=Path, help="where the token file goes (default: a temporary directory)")
    args = parser.parse_args()
    # Absolute, but not resolved: a venv's python is a link whose target would lose the venv.
    interpreters = {
        label: os.path.abspath(python) for label, python in (item.split("=", 1) for item in args.interpreter)
    }

    workdir = Path(tempfile.mkdtemp(prefix="mia-fast-startup-", dir=args.workdir))
    ids = workdir / "tokens.bin"
    (np.random.default_rng(0).zipf(1.2, TOKENS) % VOCAB).astype(np.uint16).tofile(ids)
    first = next(iter(interpreters.values()))
    commands = {"python -c pass": [first, "-c", "pass"], "python -c 'import numpy'": [first, "-c", "import numpy"]}
    for label, python in interpreters.items():
        commands[f"{label}: import mia_fast"] = [python, "-c", "import mia_fast"]
        commands[f"{label}: mia-fast --help"] = [python, "-m", "mia_fast.cli", "--help"]
        out = workdir / f"{label}.freq"
        commands[f"{label}: mia-fast freq build-tokens"] = [
            python,
            "-m",
            "mia_fast.cli",
            "freq",
            "build-tokens",
            str(ids),
            "--dtype",
            "uint16",
            "--vocab-size",
            str(VOCAB),
            "--out",
            str(out),
            "--overwrite",
            "--quiet",
        ]
    for command in commands.values():  # warm the page cache and the bytecode caches
        wall(command, workdir)
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for round_index in range(args.rounds):
        for name, command in commands.items():
            seconds[name].append(wall(command, workdir))
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    in_process = float(
        subprocess.run(
            [first, "-c", IN_PROCESS, str(ids), str(args.rounds)],
            check=True,
            capture_output=True,
            text=True,
            env=ENV,
            cwd=workdir,
        ).stdout
    )
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "benchmark": "startup",
        "machine": machine(),
        "tokens": TOKENS,
        "rounds": args.rounds,
        "interpreters": interpreters,
        "seconds": seconds,
        "median_seconds": median,
        "in_process_build_from_tokens_seconds": in_process,
        "build_tokens_vs_in_process": {
            label: median[f"{label}: mia-fast freq build-tokens"] / in_process for label in interpreters
        },
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"startup-{os.cpu_count()}core.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    for name, value in median.items():
        print(f"{name:<45} {value:7.3f} s")
    print(f"{'in-process build_from_tokens (first interpreter)':<45} {in_process:7.3f} s")
    print(f"wrote {path}")
    for item in workdir.iterdir():
        item.unlink()
    workdir.rmdir()


if __name__ == "__main__":
    main()
