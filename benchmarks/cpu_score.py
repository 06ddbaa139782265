"""Scoring speed on CPU: mia-fast's engine vs the public per-sample loop vs a pure batched forward.

Two models, each scored side by side in one process on the same texts (fp32), interleaved round by
round so that machine noise hits the contenders alike; medians over the rounds are reported:

- ``builtin``: the built-in SmolLM2-135M (V = 49152) on the first 100 wikipedia_en texts cut to 100 words;
- ``qwen-152k``: a random-initialised model of the Qwen2.5-0.5B shape (V = 151936, H = 896, 24 layers;
  SmolLM2's tokenizer, whose ids all fit) on the first 20 PubMed abstracts, about 300 tokens each;
- ``pythia-160m``: a random-initialised gpt_neox of Pythia-160M's shape (V = 50304, H = 768, 12 layers; SmolLM2's
  tokenizer) on the same 100 wikipedia_en texts as ``builtin``.

Contenders: the public Min-K%++ loop; ``Detector.score`` with loss, zlib, mink and minkpp at 10 k's
(the engine of ``mia-fast score``); the same on the model's own forward (``forward="model"``: padded rows, where the
engine's default is the packed decoder); the same with the logit chunking of before the fix (16 MB of
logits per head projection and per reduction); the forward alone with the engine's batches; and
``score_file`` from a .jsonl of the texts to a scores file in blocks of 20 rows, with the next block read
and tokenized and the last one written on their own threads (``overlap``) or all in turn on one thread
(``sequential``, as before the overlap). Writes ``results/<--name>.json`` (default
``cpu-score-<cores>core``).

    python benchmarks/cpu_score.py [--models builtin,qwen-152k] [--rounds 3] [--name NAME] [--contenders a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import RESULTS, machine, pile_texts
from reference_loop import public_loop_scores

from mia_fast import (
    ComputeConfig,
    DataStream,
    Detector,
    LoadedModel,
    ModelConfig,
    OutputConfig,
    RunConfig,
    ScoringConfig,
    score_file,
)
from mia_fast.engines.batching import plan_batches
from mia_fast.methods import DEFAULT_KS
from mia_fast.pipeline.models import load_tokenizer
from mia_fast.tokens.tokenize import split_windows

METHODS = ["loss", "zlib", "mink", "minkpp"]
FILE_BLOCK_ROWS = 20
# The engine's CPU logit chunk before the fix: the head projected and the statistics reduced 16 MB at a time.
CHUNK_BYTES_BEFORE_FIX = 16 << 20
QWEN_0_5B_SHAPE = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
)
PYTHIA_160M_SHAPE = dict(
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    vocab_size=50304,
    max_position_embeddings=2048,
    rotary_pct=0.25,
    use_parallel_residual=True,
    hidden_act="gelu",
    tie_word_embeddings=False,
)


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


def detector_and_texts(name: str, batch_tokens: int | None) -> tuple[Detector, list[str]]:
    compute = ComputeConfig(batch_tokens=batch_tokens)
    if name == "builtin":
        model = ModelConfig(device="cpu", dtype="fp32", prepend_start=False)
        return Detector(model, compute=compute), pile_texts("wikipedia_en", n=100, max_words=100)
    if name == "qwen-152k":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN_0_5B_SHAPE)).eval()
        loaded = LoadedModel(
            model, load_tokenizer("default"), "random Qwen2.5-0.5B shape (V=151936)", torch.device("cpu"), torch.float32
        )
        detector = Detector(ModelConfig(loaded, prepend_start=False), compute=compute)
        return detector, pile_texts("pubmed_abstracts", n=20, max_words=None)
    if name == "pythia-160m":
        from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

        torch.manual_seed(0)
        model = GPTNeoXForCausalLM(GPTNeoXConfig(**PYTHIA_160M_SHAPE)).eval()
        loaded = LoadedModel(
            model, load_tokenizer("default"), "random Pythia-160M shape (gpt_neox)", torch.device("cpu"), torch.float32
        )
        detector = Detector(ModelConfig(loaded, prepend_start=False), compute=compute)
        return detector, pile_texts("wikipedia_en", n=100, max_words=100)
    raise SystemExit(f"unknown model {name!r}; choose builtin or qwen-152k")


def with_chunking(engine, chunk_rows: int, stats_rows: int):
    """The padded model forward with the logit chunking of before the fix (not the packed forward of now)."""

    def run(fn):
        saved = engine.chunk_rows, engine.stats_rows
        engine.chunk_rows, engine.stats_rows = chunk_rows, stats_rows
        try:
            return on_model_forward(engine, fn)()
        finally:
            engine.chunk_rows, engine.stats_rows = saved

    return run


def on_model_forward(engine, fn):
    """``fn`` run with the engine on the model's own forward, then back on its own choice."""

    def run():
        engine.use_forward("model")
        try:
            return fn()
        finally:
            engine.use_forward("auto")

    return run


def scoring_file(detector: Detector, texts: list[str], scratch: Path, *, overlap: bool):
    """``score_file`` over a .jsonl of ``texts``, in blocks of FILE_BLOCK_ROWS rows, overlapped or not."""
    data = scratch / "texts.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    config = RunConfig(
        OutputConfig(scratch / "scores.jsonl", overwrite=True, block_rows=FILE_BLOCK_ROWS),
        scoring=ScoringConfig(METHODS, DEFAULT_KS),
        compute=ComputeConfig(progress=False, overlap=overlap),
    )
    return lambda: score_file(DataStream(data), config, detector)


# Ratios of median times: (name, numerator contender, denominator contender); reported where both ran.
RATIOS = [
    ("speedup_vs_public_loop", "public_loop", "mia_fast_score"),
    ("speedup_vs_model_forward", "mia_fast_score_model_forward", "mia_fast_score"),
    ("speedup_vs_public_loop_before_fix", "public_loop", "mia_fast_score_before_fix"),
    ("forward_only_vs_public_loop", "public_loop", "batched_forward_only"),
    ("score_file_overlap_speedup", "score_file_sequential", "score_file_overlap"),
]


def bench_model(name: str, rounds: int, batch_tokens: int | None, scratch: Path, only: list[str] | None) -> dict:
    detector, texts = detector_and_texts(name, batch_tokens)
    engine = detector.target
    model, tokenizer = engine.loaded.model, engine.loaded.tokenizer
    scored_tokens = sum(len(ids) - 1 for ids in engine.tokenize(texts))
    old_rows = max(1, CHUNK_BYTES_BEFORE_FIX // (4 * engine.loaded.vocab_size))
    before_fix = with_chunking(engine, old_rows, old_rows)
    contenders = {
        "public_loop": lambda: public_loop_scores(model, tokenizer, texts, DEFAULT_KS),
        "mia_fast_score": lambda: detector.score(texts, methods=METHODS, k=DEFAULT_KS),
        "mia_fast_score_model_forward": on_model_forward(
            engine, lambda: detector.score(texts, methods=METHODS, k=DEFAULT_KS)
        ),
        "mia_fast_score_before_fix": lambda: before_fix(lambda: detector.score(texts, methods=METHODS, k=DEFAULT_KS)),
        "batched_forward_only": lambda: batched_forward(engine, texts),
        "score_file_overlap": scoring_file(detector, texts, scratch, overlap=True),
        "score_file_sequential": scoring_file(detector, texts, scratch, overlap=False),
    }
    unknown = set(only or ()) - set(contenders)
    if unknown:
        raise SystemExit(f"unknown contenders {sorted(unknown)}; choose from {', '.join(contenders)}")
    contenders = {c: fn for c, fn in contenders.items() if not only or c in only}
    detector.score(texts, methods=METHODS, k=DEFAULT_KS)  # warm-up: first-call allocations and lazy init
    times: dict[str, list[float]] = {c: [] for c in contenders}
    for round_index in range(rounds):
        for contender, fn in contenders.items():
            times[contender].append(timed(fn))
            print(f"{name} round {round_index + 1}: {contender} {times[contender][-1]:.2f}s", file=sys.stderr)
    median = {c: statistics.median(t) for c, t in times.items()}
    return {
        "model": engine.loaded.name,
        "forward": engine.path.describe(),
        "vocab_size": engine.loaded.vocab_size,
        "texts": len(texts),
        "scored_tokens": scored_tokens,
        "batch_tokens": engine.batch_tokens,
        "chunking": {
            "after_fix": {"head_rows": engine.chunk_rows, "stats_rows": engine.stats_rows},
            "before_fix": {"head_rows": old_rows, "stats_rows": old_rows},
        },
        "seconds": times,
        "median_seconds": median,
        "tokens_per_second": {c: scored_tokens / s for c, s in median.items()},
        **{ratio: median[a] / median[b] for ratio, a, b in RATIOS if a in median and b in median},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="builtin,qwen-152k")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--name", default=f"cpu-score-{os.cpu_count()}core", help="results file stem")
    parser.add_argument("--contenders", help="comma-separated subset of the contenders (default all)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        only = args.contenders.split(",") if args.contenders else None
        results = {
            name: bench_model(name, args.rounds, args.batch_tokens, Path(scratch), only)
            for name in args.models.split(",")
        }
    result = {
        "benchmark": "cpu_score",
        "machine": machine(),
        "dtype": "fp32",
        "methods": METHODS,
        "ks": list(DEFAULT_KS),
        "rounds": args.rounds,
        "models": results,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    for name, r in results.items():
        print(f"{name} ({r['model']}, {r['scored_tokens']} tokens)")
        for contender, seconds in r["median_seconds"].items():
            print(f"  {contender:<28} {seconds:7.2f}s  {r['tokens_per_second'][contender]:8.0f} tok/s")
        for ratio, a, b in RATIOS:
            if ratio in r:
                print(f"  {ratio} ({a} / {b}): {r[ratio]:.3f}x")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
