"""Scoring speed on CPU: mia-fast's engine vs the public per-sample loop vs a pure batched forward.

The three run side by side in one process on the same texts and model (fp32), interleaved round by
round so that machine noise hits them alike; medians over the rounds are reported. Writes
``results/cpu-score-<cores>core.json``.

    python benchmarks/cpu_score.py [--texts 100] [--words 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, machine, pile_texts  # noqa: E402
from mia_fast import Detector  # noqa: E402
from mia_fast.engine import plan_batches, split_windows  # noqa: E402
from mia_fast.methods import DEFAULT_KS  # noqa: E402
from mia_fast.reference_loop import public_loop_scores  # noqa: E402

METHODS = ["loss", "zlib", "mink", "minkpp"]


@torch.inference_mode()
def batched_forward(engine, texts) -> None:
    """The forward pass alone, batched exactly as the engine batches: logits, no statistics."""
    all_ids = engine.tokenize(texts)
    windows = [w for i, ids in enumerate(all_ids) for w in split_windows(i, len(ids), engine.max_length)]
    for batch in plan_batches([w.length for w in windows], engine.batch_tokens):
        rows = [all_ids[windows[i].text_index][windows[i].begin : windows[i].end] for i in batch]
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), engine.pad_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, ids in enumerate(rows):
            input_ids[r, : len(ids)] = torch.tensor(ids)
            mask[r, : len(ids)] = 1
        engine.loaded.model(input_ids=input_ids, attention_mask=mask)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=100)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-tokens", type=int, default=None)
    args = parser.parse_args()

    texts = pile_texts("wikipedia_en", n=args.texts, max_words=args.words)
    detector = Detector(prepend_start=False, device="cpu", dtype="fp32", batch_tokens=args.batch_tokens)
    engine = detector.target
    model, tokenizer = engine.loaded.model, engine.loaded.tokenizer
    scored_tokens = sum(len(ids) - 1 for ids in engine.tokenize(texts))
    contenders = {
        "public_loop": lambda: public_loop_scores(model, tokenizer, texts, DEFAULT_KS),
        "mia_fast_score": lambda: detector.score(texts, methods=METHODS, k=DEFAULT_KS),
        "batched_forward_only": lambda: batched_forward(engine, texts),
    }
    contenders["mia_fast_score"]()  # warm-up: first-call allocations and lazy init
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_index in range(args.rounds):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
            print(f"round {round_index + 1}: {name} {times[name][-1]:.2f}s", file=sys.stderr)

    median = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "benchmark": "cpu_score",
        "machine": machine(),
        "model": engine.loaded.name,
        "dtype": "fp32",
        "texts": args.texts,
        "words_per_text": args.words,
        "scored_tokens": scored_tokens,
        "methods": METHODS,
        "ks": list(DEFAULT_KS),
        "batch_tokens": engine.batch_tokens,
        "rounds": args.rounds,
        "seconds": times,
        "median_seconds": median,
        "tokens_per_second": {name: scored_tokens / s for name, s in median.items()},
        "speedup_vs_public_loop": median["public_loop"] / median["mia_fast_score"],
        "scoring_overhead_vs_forward": median["mia_fast_score"] / median["batched_forward_only"],
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"cpu-score-{os.cpu_count()}core.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    for name, tps in result["tokens_per_second"].items():
        print(f"{name:<22} {median[name]:7.2f}s  {tps:8.0f} tok/s")
    print(f"speed-up vs public loop: {result['speedup_vs_public_loop']:.2f}x; score / forward-only: {result['scoring_overhead_vs_forward']:.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
