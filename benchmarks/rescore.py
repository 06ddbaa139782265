"""Re-scoring from the stats cache: how long does a new set of methods, k's or cap take over cached texts?

    python benchmarks/rescore.py [--texts 1000000] [--tokens 256] [--shard 50000]

Fills a stats cache with ``--texts`` texts of ``--tokens`` scored tokens each (random statistics over a
49152-token vocabulary: the time does not depend on the values), in shards as a scoring run writes
them, then times ``Detector.from_stats_cache(...).score`` with every method that reads the plain pass
and the text (loss, zlib, mink and minkpp at 10 k's, lowercase: an all-lowercase text is its own
lowercase pass) over all of them: reading and checking the shards, assembling the TokenStats, and the
methods, with no model. Writes ``results/rescore-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import RESULTS, machine

from mia_fast import Detector
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import StatsCache, text_key
from mia_fast.methods import DEFAULT_KS
from mia_fast.ops.first_occurrence import first_occurrence_mask

METHODS = ["loss", "zlib", "mink", "minkpp", "lowercase"]
VOCAB = 49152


def fill(directory: Path, texts: list[str], tokens: int, shard: int) -> float:
    cache = StatsCache(directory, {"benchmark": "rescore", "tokens": tokens})
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for lo in range(0, len(texts), shard):
        part = texts[lo : lo + shard]
        n = len(part) * tokens
        ids, logp = rng.integers(0, VOCAB, n), -rng.exponential(3.0, n).astype(np.float32)
        mu, var = (logp * 0.5).astype(np.float32), rng.uniform(0.5, 4.0, n).astype(np.float32)
        offsets = np.arange(0, n + 1, tokens, dtype=np.int64)
        cache.store(
            [text_key("", t) for t in part],
            TokenStats(offsets, ids, logp, mu, var, logp * 0.25, first_occurrence_mask(ids, offsets)),
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1_000_000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--shard", type=int, default=50_000, help="texts per cache shard (default 50000)")
    parser.add_argument("--cache", type=Path, help="an existing or new cache directory (default: a temporary one)")
    args = parser.parse_args()
    texts = [f"text number {i} of the rescore benchmark" for i in range(args.texts)]
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.cache or Path(scratch) / "cache"
        filled = fill(directory, texts, args.tokens, args.shard) if not directory.exists() else None
        size = sum(p.stat().st_size for p in directory.rglob("*.arrow"))
        started = time.perf_counter()
        scores = Detector.from_stats_cache(directory).score(texts, methods=METHODS, k=list(DEFAULT_KS))
        seconds = time.perf_counter() - started
    print(
        f"{args.texts} texts x {args.tokens} tokens ({size / 2**30:.2f} GiB of shards): "
        f"re-scored {len(scores)} columns in {seconds:.1f} s"
        + (f" (filling the cache took {filled:.1f} s)" if filled else "")
    )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"rescore-{os.cpu_count()}core.json"
    path.write_text(
        json.dumps(
            {
                "benchmark": "rescore",
                "machine": machine(),
                "texts": args.texts,
                "tokens": args.tokens,
                "shard_texts": args.shard,
                "cache_bytes": size,
                "columns": len(scores),
                "methods": METHODS,
                "k": list(DEFAULT_KS),
                "seconds_rescore": seconds,
                "seconds_fill": filled,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
