"""Peak memory of ``mia-fast score`` against the input's size: does it stay flat as the input grows?

    python benchmarks/stream_memory.py [--rows 10000,1000000] [--code DIR ...]

Writes a .jsonl input of short rows (an id and 2 to 8 words), scores it with ``mia-fast score`` (loss and
zlib; 16384 tokens per batch) using a tiny random model (2 layers, hidden 32, a 300-token BPE tokenizer
trained here: the model's cost is not what is measured) in a fresh process per run, and records that
process's peak resident memory (``ru_maxrss``), its wall time and the SHA-256 of the scores file.
``--code`` runs the same command with another checkout's ``mia_fast`` (e.g. a ``git worktree`` of an
earlier commit), so the outputs and the memory of two versions can be compared on the same inputs. Writes
``results/stream-memory-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, WORDS, machine, word_tokenizer

METHODS = "loss,zlib"
# ``mia-fast`` from the checkout named by its first argument: an editable install's import redirect would
# otherwise load the installed checkout whatever the path says.
RUN_FROM_CHECKOUT = (
    "import runpy, sys; code = sys.argv.pop(1); "
    "sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith('_editable')]; "
    "sys.path.insert(0, code); runpy.run_module('mia_fast.cli', run_name='__main__')"
)
# A tiny model's forward costs less than a batch's overhead: larger batches than the CPU default keep 1M rows
# to minutes.
BATCH_TOKENS = 16384


def tiny_model(directory: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_rows(path: Path, rows: int) -> Path:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(json.dumps({"id": i, "text": " ".join(rng.choices(WORDS, k=rng.randint(2, 8)))}) + "\n")
    return path


def run_score(code: Path, data: Path, model: Path, out: Path) -> dict:
    """One ``mia-fast score`` in a fresh process: its peak RSS, wall time and the digest of what it wrote."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-c",
        RUN_FROM_CHECKOUT,
        str(code),
        "score",
        str(data),
        "--out",
        str(out),
        "--model",
        str(model),
        "--methods",
        METHODS,
        "--batch-tokens",
        str(BATCH_TOKENS),
        "--quiet",
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{process.stderr.read()}")
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "wall_s": round(wall, 1),
        "output_sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "output_rows": sum(1 for _ in open(out, "rb")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", default="10000,1000000", help="input sizes, comma-separated, each run with every --code"
    )
    parser.add_argument(
        "--code", type=Path, action="append", help="a checkout whose mia_fast to run (repeatable; default this one)"
    )
    parser.add_argument("--name", default=f"stream-memory-{os.cpu_count()}core", help="results file stem")
    args = parser.parse_args()
    codes = args.code or [Path(__file__).resolve().parents[1]]
    results = {"machine": machine(), "methods": METHODS, "runs": []}
    path = RESULTS / f"{args.name}.json"
    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model = tiny_model(scratch / "model")
        for rows in map(int, args.rows.split(",")):
            data = write_rows(scratch / f"rows-{rows}.jsonl", rows)
            for code in codes:
                run = {
                    "rows": rows,
                    "input_mb": round(data.stat().st_size / 2**20, 1),
                    "code": str(code),
                    **run_score(code, data, model, scratch / "scores.jsonl"),
                }
                (scratch / "scores.jsonl").unlink()
                results["runs"].append(run)
                path.write_text(json.dumps(results, indent=2) + "\n")  # after each run: a long one may be stopped
                print(json.dumps(run), flush=True)


if __name__ == "__main__":
    main()
