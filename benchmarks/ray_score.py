"""Scoring on a local Ray against one process: the wall time of ``score_on_ray`` (2 model actors) and of
``score_file`` on the same input, interleaved round by round; medians over the rounds.

Input: 2,000 rows of 24 words, the first two 24-word pieces of each of the first 1,000 texts of
``pile_test/wikipedia_en``. Model: a random 2-layer Llama (hidden 64) with SmolLM2's tokenizer
(V = 49,152), saved to a directory that both contenders load, so that the time is not all forward
passes of a large model and the fixed costs of Ray show. Methods loss, zlib, mink and minkpp at 10 k's,
fp32, blocks of 100 rows, shards of 200 (10 shards).

Contenders: ``score_file`` in this process with torch's default threads (one per core) and with one
thread, and ``score_on_ray`` with ``--workers`` CPU actors (each given cores // workers CPUs, so Ray
runs torch on that many threads in each). Each loads the model in every round (the process, or every
actor); Ray is started once before the rounds (its start-up is reported apart). Every round checks that
the Ray output equals, byte for byte, the one-process output with as many torch threads as an actor
has, and records how far the other one-process output is from it.
Writes ``results/<--name>.json`` (default ``ray-score-<cores>core``).

    python benchmarks/ray_score.py [--rounds 3] [--workers 2] [--name NAME]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import RESULTS, SHARED_DATA, machine

from mia_fast import (
    ComputeConfig,
    DataStream,
    ModelConfig,
    OutputConfig,
    RunConfig,
    ScoringConfig,
    score_file,
    score_on_ray,
)
from mia_fast.cluster import RayConfig
from mia_fast.methods import DEFAULT_KS
from mia_fast.pipeline.models import load_tokenizer

METHODS = ["loss", "zlib", "mink", "minkpp"]
ROWS, WORDS = 2000, 24
BLOCK_ROWS, SHARD_ROWS = 100, 200


def write_rows(path: Path) -> None:
    import gzip

    rows = []
    with gzip.open(SHARED_DATA / "pile_test" / "wikipedia_en.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            words = json.loads(line)["text"].split()
            rows += [" ".join(words[i : i + WORDS]) for i in (0, WORDS) if len(words) >= i + WORDS]
            if len(rows) >= ROWS:
                break
    path.write_text("".join(json.dumps({"id": i, "text": text}) + "\n" for i, text in enumerate(rows[:ROWS])))


def save_model(directory: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer("default")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def with_threads(threads: int, fn):
    def run():
        default = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn()
        finally:
            torch.set_num_threads(default)

    return run


def largest_difference(path_a: Path, path_b: Path) -> tuple[int, float]:
    """Rows that differ, and the largest relative difference of a score between two outputs."""
    rows_a, rows_b = ([json.loads(line) for line in path.read_text().splitlines()] for path in (path_a, path_b))
    differing = sum(a != b for a, b in zip(rows_a, rows_b))
    relative = max(
        (
            abs(a[c] - b[c]) / max(abs(a[c]), 1e-300)
            for a, b in zip(rows_a, rows_b)
            for c in a
            if isinstance(a[c], float)
        ),
        default=0.0,
    )
    return differing, relative


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default=f"ray-score-{os.cpu_count()}core", help="results file stem")
    args = parser.parse_args()
    import ray

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        data, model = scratch / "rows.jsonl", scratch / "model"
        write_rows(data)
        save_model(model)

        def config(out: Path) -> RunConfig:
            return RunConfig(
                OutputConfig(out, overwrite=True, block_rows=BLOCK_ROWS),
                ModelConfig(str(model), device="cpu", dtype="fp32"),
                ScoringConfig(METHODS, DEFAULT_KS),
                ComputeConfig(progress=False),
            )

        started = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        ray_init = time.perf_counter() - started
        actor_threads = max(1, os.cpu_count() // args.workers)
        contenders = {
            "one_process": lambda: score_file(DataStream(data), config(scratch / "one.jsonl")),
            f"one_process_{actor_threads}_thread": with_threads(
                actor_threads, lambda: score_file(DataStream(data), config(scratch / "one-actor-threads.jsonl"))
            ),
            "ray": lambda: score_on_ray(
                DataStream(data),
                config(scratch / "ray.jsonl"),
                RayConfig(workers=args.workers, shard_rows=SHARD_ROWS),
            ),
        }
        times: dict[str, list[float]] = {c: [] for c in contenders}
        for round_index in range(args.rounds):
            for contender, fn in contenders.items():
                times[contender].append(timed(fn))
                print(f"round {round_index + 1}: {contender} {times[contender][-1]:.2f}s", file=sys.stderr)
            if (scratch / "one-actor-threads.jsonl").read_bytes() != (scratch / "ray.jsonl").read_bytes():
                raise SystemExit(
                    f"the Ray output differs from the one-process output with {actor_threads} torch thread(s)"
                )
        differing_rows, relative = largest_difference(scratch / "one.jsonl", scratch / "ray.jsonl")
        ray.shutdown()
    median = {c: statistics.median(t) for c, t in times.items()}
    result = {
        "benchmark": "ray_score",
        "machine": machine(),
        "ray": ray.__version__,
        "rows": ROWS,
        "words_per_row": WORDS,
        "methods": METHODS,
        "ks": list(DEFAULT_KS),
        "block_rows": BLOCK_ROWS,
        "shard_rows": SHARD_ROWS,
        "ray_workers": args.workers,
        "torch_threads_per_actor": actor_threads,
        "rounds": args.rounds,
        "model": "random Llama, 2 layers, hidden 64, SmolLM2 tokenizer (V=49152)",
        "ray_init_seconds": ray_init,
        "seconds": times,
        "median_seconds": median,
        "ray_over_one_process": {c: median["ray"] / median[c] for c in contenders if c != "ray"},
        "ray_equals_one_process_with_actor_threads": True,
        "ray_vs_one_process_default_threads": {"differing_rows": differing_rows, "max_relative_difference": relative},
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{ROWS} rows, {args.workers} Ray workers on {os.cpu_count()} cores (Ray start-up {ray_init:.1f}s, not counted)"
    )
    for contender, seconds in median.items():
        ratio = f"  Ray / this: {result['ray_over_one_process'][contender]:.2f}x" if contender != "ray" else ""
        print(f"  {contender:<22} {seconds:7.2f}s{ratio}")
    print(
        f"  Ray output = one process with {actor_threads} torch thread(s), byte for byte; vs the default threads: "
        f"{differing_rows} row(s) differ, by at most {relative:.1e} relative"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
