"""Where the time of ``Detector.score`` goes on CPU, per dtype: tokenization, the body's matrix products
(q/k/v, attention output, gate/up, down), attention, the output head, the streamed statistics, the rest
of the forward (norms, rotary, activations, copies) and what lies outside the forward (methods, host work).

The built-in SmolLM2-135M on the first 100 wikipedia_en texts cut to 100 words, loss, zlib, mink and
minkpp at 10 k's, as in ``peer_vllm.py``. Each product of the packed decoder and each statistics merge
is wrapped in a labelled profiler range (here only: the library has none), so the table adds up to
the run's wall time. Also reports the padding a padded forward would compute. Writes
``results/<--name>.json``.

    python benchmarks/profile_score.py [--dtypes fp32,bf16] [--name profile-score-2core]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from common import RESULTS, machine, pile_texts
from torch.profiler import ProfilerActivity, profile, record_function

from mia_fast import Detector, ModelConfig
from mia_fast.engines.batching import plan_batches
from mia_fast.methods import DEFAULT_KS
from mia_fast.ops.token_stats import StreamedTokenStats
from mia_fast.pipeline.packed import PackedDecoder
from mia_fast.tokens.tokenize import tokenize

METHODS = ["loss", "zlib", "mink", "minkpp"]
PRODUCTS = ("qkv", "out", "gate", "up", "down")


class Labelled:
    """A packed decoder's product whose every call (``x @ W.T`` or a fused ``activated``/``times``/``added_to``) runs
    in a profiler range named ``label``."""

    def __init__(self, label: str, product) -> None:
        self.label, self.product = label, product

    def __call__(self, *args):
        with record_function(self.label):
            return self.product(*args)

    def __getattr__(self, name: str):
        method = getattr(self.product, name)

        def run(*args):
            with record_function(self.label):
                return method(*args)

        return run


def labelled(label: str, fn):
    def run(*args):
        with record_function(label):
            return fn(*args)

    return run


def instrument(decoder: PackedDecoder) -> None:
    decoder.layers = [
        replace(
            layer,
            qkv=replace(layer.qkv, products=tuple(Labelled("qkv", p) for p in layer.qkv.products)),
            out=Labelled("out", layer.out),
            mlp=replace(
                layer.mlp, **{name: Labelled(name, getattr(layer.mlp, name)) for name in ("gate", "up", "down")}
            ),
        )
        for layer in decoder.layers
    ]
    decoder.head_chunks = [(start, Labelled("head", project)) for start, project in decoder.head_chunks]


def profile_dtype(dtype: str, texts: list[str]) -> dict:
    detector = Detector(ModelConfig(device="cpu", dtype=dtype))
    engine = detector.target
    detector.score(texts, methods=METHODS, k=DEFAULT_KS)  # warm-up; builds the packed decoder
    instrument(engine.packed_decoder())
    add = StreamedTokenStats.add
    StreamedTokenStats.add = lambda self, logits, first_id: labelled("statistics", add)(self, logits, first_id)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            detector.score(texts, methods=METHODS, k=DEFAULT_KS)
            wall = time.perf_counter() - start
    finally:
        StreamedTokenStats.add = add
    ranges = {e.key: e.cpu_time_total / 1e6 for e in prof.key_averages() if e.key in (*PRODUCTS, "head", "statistics")}
    attention = (
        sum(e.self_cpu_time_total for e in prof.key_averages() if "scaled_dot_product" in e.key and "flash" in e.key)
        / 1e6
    )
    start = time.perf_counter()
    lengths = [len(ids) for ids in tokenize(engine.loaded.tokenizer, texts, prepend_start=engine.prepend_start)]
    tokenize_s = time.perf_counter() - start
    padded = sum(len(b) * max(lengths[i] for i in b) for b in plan_batches(lengths, engine.batch_tokens))
    rows_total = sum(lengths)
    accounted = sum(ranges.values()) + attention
    return {
        "wall_s": wall,
        "tokens": rows_total,
        "tokenization_s": tokenize_s,
        "products_s": {name: ranges.get(name, 0.0) for name in PRODUCTS},
        "head_s": ranges.get("head", 0.0),
        "statistics_s": ranges.get("statistics", 0.0),
        "attention_s": attention,
        "everything_else_s": wall - accounted - tokenize_s,
        "padding": {"real_tokens": rows_total, "padded_forward_tokens": padded, "waste": padded / rows_total - 1},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--name", default=f"profile-score-{os.cpu_count()}core")
    args = parser.parse_args()
    texts = pile_texts("wikipedia_en", n=100, max_words=100)
    results = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "load_average": list(os.getloadavg()),
        "dtypes": {},
    }
    for dtype in args.dtypes.split(","):
        results["dtypes"][dtype] = entry = profile_dtype(dtype, texts)
        print(dtype, json.dumps(entry, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
