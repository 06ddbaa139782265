"""What the first-use self-check costs: the demo (``mia-fast demo``, the built-in model on this CPU) with the check
on, as on a GPU, against the demo without it (the CPU's own plan), interleaved over ``--rounds``, medians; and the
time spent inside the checks themselves, summed over each run (far less noisy than the difference of two whole runs).
Each round runs both, in turn first.

On a CPU the check is off (its plan runs nothing no test here runs); this turns it on by standing in for a GPU's plan,
so that the packed forward's check (one short text through the packed decoder and through the model's own forward)
runs for every engine the demo makes. The kernels' check runs where the Triton kernels do (a GPU): not here.
Writes ``results/self-check-cost-<cores>core.json``:

    python benchmarks/self_check_cost.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine

from mia_fast.cli.main import main as cli
from mia_fast.pipeline import device, engine


@contextlib.contextmanager
def checked(spent: list[float]):
    """The demo with every device's plan checking itself, the seconds inside each check appended to ``spent``."""
    own_plan, own_backend, own_path = device.plan_for, engine.proven_backend, engine.proven_path

    def timed(function):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)

        return run

    device.plan_for = lambda found: dataclasses.replace(own_plan(found), self_checks=True)
    engine.proven_backend, engine.proven_path = timed(own_backend), timed(own_path)
    try:
        yield
    finally:
        device.plan_for, engine.proven_backend, engine.proven_path = own_plan, own_backend, own_path


def demo() -> float:
    with tempfile.TemporaryDirectory() as report:
        start = time.perf_counter()
        assert cli(["demo", "--report", report, "--quiet"]) == 0
        return time.perf_counter() - start


def write(seconds: dict[str, list[float]], inside: list[float], loads: list) -> None:
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "benchmark": "self-check-cost",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
        "rounds": len(inside),
        "seconds": seconds,
        "median_s": median,
        "inside_checks_s": inside,
        "inside_share_of_demo": statistics.median(inside) / median["without"],
        "whole_run_ratio": median["with"] / median["without"],
        "load_average_per_round": loads,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"self-check-cost-{os.cpu_count()}core.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(
        json.dumps({k: result[k] for k in ("median_s", "inside_checks_s", "inside_share_of_demo", "whole_run_ratio")})
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-warmup", action="store_true", help="where the default model is de-quantised already")
    args = parser.parse_args()
    if not args.no_warmup:
        demo()  # the default model de-quantised, caches filled
    seconds: dict[str, list[float]] = {"without": [], "with": []}
    inside: list[float] = []
    loads = []
    for round_index in range(args.rounds):
        loads.append(os.getloadavg())
        spent: list[float] = []
        for contender in ("without", "with") if round_index % 2 == 0 else ("with", "without"):  # turn about
            if contender == "with":
                with checked(spent):
                    seconds["with"].append(demo())
            else:
                seconds["without"].append(demo())
        inside.append(sum(spent))
        write(seconds, inside, loads)  # after every round: a stopped run keeps what it measured
        print(
            f"round {round_index + 1}: without {seconds['without'][-1]:.1f} s, with {seconds['with'][-1]:.1f} s "
            f"({len(spent)} checks, {inside[-1]:.3f} s inside them)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
