"""Peak memory of ``mia-fast score`` with a model loaded whole against one whose layers ``--device-map`` keeps on the
disk: what a model larger than the memory it is given costs, and that its scores do not move.

    python benchmarks/device_map.py [--texts 32] [--layers 8] [--hidden 1024] [--vocab 32000] [--dtypes fp32,bf16]

Saves a random Llama as fp32 safetensors (by default hidden 1024, 8 layers, a 32,000-token vocabulary: 690 MB of
weights; a 300-token BPE tokenizer trained here), then scores the same texts (the default methods) in a fresh process
per run and records that process's peak resident memory (``VmHWM`` of ``/proc/self/status`` as it exits: since its
``exec``, unlike a child's ``ru_maxrss``, which counts the pages it shared with this process before), what of it is
anonymous and what file-backed at the end (``RssAnon``, ``RssFile``), its wall time and the largest difference of any
score from the whole model's own forward in the same dtype, and from the packed one's:

- ``whole, packed``: ``--device cpu``, the packed decoder (which copies the weights once into oneDNN's layout);
- ``whole, own forward``: ``--device cpu --forward model``;
- ``disk``: ``--device-map`` with the embedding on the CPU and every layer, the final norm and the head on the disk
  (read from the checkpoint's own file as each runs), each in every dtype of ``--dtypes``.

In fp32 the whole model's weights are the checkpoint's pages mapped in memory (transformers maps a safetensors file
and copies nothing where the dtype is the file's): they count in its resident memory once touched, but as clean file
pages the kernel may drop and read again. In bf16 they are converted copies. A baseline process that imports what a
run imports and loads no model gives the memory every run pays anyway. Writes ``results/device-map-<cores>core.json``
with the machine, its load average before and after, and each command.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import RESULTS, WORDS, machine, word_tokenizer

BASELINE = "import torch, transformers, accelerate, mia_fast.pipeline.engine, mia_fast.scoring.runner"
# Runs a command (``-m MODULE`` or ``-c CODE`` and its arguments) and writes this process's /proc/self/status, as it
# exits, to the file $DEVICE_MAP_STATUS names.
MEASURED = (
    "import atexit, os, runpy, sys; "
    "atexit.register(lambda: open(os.environ['DEVICE_MAP_STATUS'], 'w').write(open('/proc/self/status').read())); "
    "kind, what = sys.argv.pop(1), sys.argv.pop(1); "
    "runpy.run_module(what, run_name='__main__') if kind == '-m' else exec(what)"
)
MEMORY = {"VmHWM": "peak_rss_mb", "RssAnon": "rss_anon_at_exit_mb", "RssFile": "rss_file_at_exit_mb"}


def random_model(directory: Path, layers: int, hidden: int, vocab: int) -> int:
    """A random Llama saved in ``directory``; returns its weights' bytes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = word_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Logits of the spread the tests' tiny models give (hidden 32, weights of 0.5): peaked, varied distributions.
        model.lm_head.weight.normal_(0, 0.5 * (32 / hidden) ** 0.5)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def on_disk(layers: int, from_layer: int) -> dict[str, str]:
    """The embedding and the layers before ``from_layer`` on the CPU; the rest, the norm and the head on the disk."""
    placed = {"model.embed_tokens": "cpu"}
    placed |= {f"model.layers.{i}": "cpu" if i < from_layer else "disk" for i in range(layers)}
    return placed | {"model.norm": "disk", "lm_head": "disk"}


def run(command: list[str], env: dict[str, str], status: Path) -> dict:
    """One process (``-m MODULE ARGS`` or ``-c CODE``): its peak and final memory, and its wall time."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *command], env={**env, "DEVICE_MAP_STATUS": str(status)}, capture_output=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr.decode()}")
    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
    return {name: round(int(fields[key].split()[0]) / 1024, 1) for key, name in MEMORY.items()} | {
        "wall_s": round(wall, 1)
    }


def scores(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def largest_difference(rows: list[dict], reference: list[dict]) -> float:
    return max(
        abs(row[column] - other[column])
        for row, other in zip(rows, reference, strict=True)
        for column, value in row.items()
        if isinstance(value, float)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtypes", default="fp32,bf16", help="the dtypes the own forward and the disk run in")
    parser.add_argument("--name", default=f"device-map-{os.cpu_count()}core", help="results file stem")
    args = parser.parse_args()
    results = {"machine": machine(), "load_average_before": os.getloadavg(), "runs": []}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        model = scratch / "model"
        results["weights_mb"] = round(random_model(model, args.layers, args.hidden, args.vocab) / 2**20, 1)
        results["model"] = {"layers": args.layers, "hidden": args.hidden, "vocab": args.vocab, "dtype": "fp32"}
        rng = random.Random(0)
        data = scratch / "texts.jsonl"
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(40, 120))) for _ in range(args.texts)]
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "MIA_FAST_CACHE": str(scratch / "cache")}
        score = ["-m", "mia_fast.cli", "score", str(data), "--model", str(model), "--quiet"]
        disk = ["--device-map", json.dumps(on_disk(args.layers, 0))]
        contenders = {"fp32, whole, packed": ["--device", "cpu", "--dtype", "fp32"]}
        for dtype in args.dtypes.split(","):
            contenders[f"{dtype}, whole, own forward"] = ["--device", "cpu", "--forward", "model", "--dtype", dtype]
            contenders[f"{dtype}, disk: every layer, norm, head"] = [*disk, "--dtype", dtype]
        results["baseline"] = {"command": f"python -c '{BASELINE}'", **run(["-c", BASELINE], env, scratch / "status")}
        print(json.dumps(results["baseline"]), flush=True)
        outputs = {}
        for name, flags in contenders.items():
            out = scratch / f"{len(outputs)}.jsonl"
            command = [*score, *flags, "--out", str(out)]
            entry = {
                "name": name,
                "command": f"python {' '.join(command)}".replace(str(scratch), "$SCRATCH"),
                **run(command, env, scratch / "status"),
            }
            outputs[name] = scores(out)
            own = outputs.get(f"{name.split(',')[0]}, whole, own forward", outputs[name])
            entry["max_abs_score_difference_vs_own_forward_whole"] = largest_difference(outputs[name], own)
            entry["max_abs_score_difference_vs_packed_fp32"] = largest_difference(
                outputs[name], outputs[next(iter(outputs))]
            )
            entry["offload_folders_left"] = len(list((scratch / "cache" / "offload").glob("*")))
            results["runs"].append(entry)
            print(json.dumps(entry), flush=True)
    results["load_average_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
