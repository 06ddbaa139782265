"""Frequency-table speed: pre-tokenized counting and text counting, against their baselines, in one run.

    python benchmarks/freq.py [--gib 1.0] [--text-mib 200] [--rounds 3] [--workdir DIR]

Pre-tokenized: a Zipf-distributed uint16 file (vocabulary 50257) and a uint32 one (151936) of
``--gib`` GiB each. Contenders, interleaved round by round: ``build_from_tokens`` (what
``mia-fast freq build-tokens`` runs), ``numpy.bincount`` on the same memory map, the public
DC-PDD code's Python loop (on a slice, per token), and the machine's read bandwidth: the same file
read through a fresh memory map by as many threads, doing nothing but touching every byte.

Text: the shared pile_test corpus repeated to ``--text-mib`` MiB of JSON lines, tokenized with the
built-in model's tokenizer. Contenders: ``build_from_text`` (what ``mia-fast freq build`` runs),
the same reading, batching and threads with tokenization alone (no counting), and the public
per-document loop (``tok.encode(text)[:max_tok]`` then ``counts[id] += 1``) on the first documents.

Writes ``results/freq-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import RESULTS, SHARED_DATA, machine

from mia_fast.frequency import build, text_build
from mia_fast.frequency.build import Counting
from mia_fast.frequency.corpus import BadRecords, iter_documents
from mia_fast.frequency.text_build import build_from_text
from mia_fast.frequency.token_files import build_from_tokens
from mia_fast.pipeline.models import load_tokenizer

TOKEN_FILES = {"uint16": 50257, "uint32": 151936}
PUBLIC_LOOP_TOKENS = 5_000_000
PUBLIC_LOOP_DOCUMENTS = 2_000


def zipf_file(path: Path, dtype: str, vocab: int, nbytes: int) -> Path:
    """Writes (once) a stream of Zipf(1.2) ids folded into the vocabulary, in 64M-id pieces."""
    itemsize = np.dtype(dtype).itemsize
    if path.is_file() and path.stat().st_size == nbytes:
        return path
    rng = np.random.default_rng(0)
    with open(path, "wb") as f:
        left = nbytes // itemsize
        while left:
            n = min(left, 1 << 26)
            ((rng.zipf(1.2, n) - 1) % vocab).astype(dtype).tofile(f)
            left -= n
    return path


def read_bandwidth(path: Path, threads: int) -> None:
    """Touches every byte of the file through a fresh memory map, ``threads`` at a time."""
    words = np.memmap(path, dtype=np.uint64, mode="r")
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(np.bitwise_xor.reduce, np.array_split(words, threads)))


def public_count_loop(ids: list[int], vocab: int) -> list[int]:
    """The DC-PDD public code's counting: a Python list indexed per token."""
    counts = [0] * vocab
    for token in ids:
        counts[token] += 1
    return counts


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rounds(contenders: dict, n: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(n):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
            print(f"round {r + 1}: {name} {times[name][-1]:.3f}s", file=sys.stderr)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_tokens(workdir: Path, gib: float, n_rounds: int, threads: int) -> dict:
    results = {}
    for dtype, vocab in TOKEN_FILES.items():
        path = zipf_file(workdir / f"zipf-{dtype}.bin", dtype, vocab, int(gib * 2**30) // 8 * 8)
        read_bandwidth(path, threads)  # into the page cache, so every contender reads it from memory
        ids = np.memmap(path, dtype=dtype, mode="r")
        n = len(ids)
        sample = ids[:PUBLIC_LOOP_TOKENS].tolist()
        median = rounds(
            {
                "mia_fast_build_tokens": lambda path=path, vocab=vocab, dtype=dtype: build_from_tokens(
                    [path], Counting(vocab_size=vocab), dtype=dtype, threads=threads
                ),
                "numpy_bincount": lambda path=path, vocab=vocab, dtype=dtype: np.bincount(
                    np.memmap(path, dtype=dtype, mode="r"), minlength=vocab
                ),
                "read_only": lambda path=path: read_bandwidth(path, threads),
            },
            n_rounds,
        )
        public_seconds = timed(lambda sample=sample, vocab=vocab: public_count_loop(sample, vocab)) * n / len(sample)
        ours = median["mia_fast_build_tokens"]
        results[dtype] = {
            "vocab_size": vocab,
            "tokens": n,
            "bytes": path.stat().st_size,
            "threads": threads,
            "median_seconds": median,
            "public_loop_seconds_extrapolated": public_seconds,
            "tokens_per_second": {name: n / s for name, s in median.items()} | {"public_loop": n / public_seconds},
            "read_bandwidth_bytes_per_second": path.stat().st_size / median["read_only"],
            "speedup_vs_bincount": median["numpy_bincount"] / ours,
            "speedup_vs_public_loop": public_seconds / ours,
            "fraction_of_read_bandwidth": median["read_only"] / ours,
        }
    return results


def repeated_corpus(path: Path, mib: int) -> Path:
    """pile_test's four subsets as JSON lines, repeated until the file holds ``mib`` MiB."""
    if path.is_file() and path.stat().st_size >= mib * 2**20:
        return path
    lines = [line for f in sorted((SHARED_DATA / "pile_test").glob("*.jsonl.gz")) for line in gzip.open(f, "rb")]
    with open(path, "wb") as out:
        written = 0
        while written < mib * 2**20:
            for line in lines:
                out.write(line)
                written += len(line)
    return path


def tokenize_only(path: Path, tokenizer, workers: int) -> int:
    """build_from_text's reading, batching and threads, with the tokenizer alone: the floor for counting."""
    rust = build.counting_tokenizer(tokenizer)
    encode = getattr(rust, "encode_batch_fast", rust.encode_batch)

    def tokenize(texts: list[str]) -> int:
        return sum(len(e.ids) for e in encode(texts, add_special_tokens=False))

    tokens, pending = 0, []
    with ThreadPoolExecutor(workers) as pool:
        for texts, _ in text_build._batches(iter_documents(path, "text", BadRecords())):
            pending.append(pool.submit(tokenize, texts))
            while len(pending) > 2 * workers:
                tokens += pending.pop(0).result()
        tokens += sum(f.result() for f in pending)
    return tokens


def public_text_loop(path: Path, tokenizer, documents: int) -> dict[str, float]:
    """The DC-PDD public code's loop over the first ``documents`` (``tok.encode(text)`` then a Python
    list per token), timed in its two parts."""
    with open(path, "rb") as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, documents)]
    started = time.perf_counter()
    encoded = [tokenizer.encode(text) for text in texts]
    encoding = time.perf_counter() - started
    started = time.perf_counter()
    counts = [0] * len(tokenizer)
    for ids in encoded:
        for token in ids:
            counts[token] += 1
    counting = time.perf_counter() - started
    tokens = sum(map(len, encoded))
    return {
        "tokens": tokens,
        "tokens_per_second": tokens / (encoding + counting),
        "tokenizing_share": encoding / (encoding + counting),
    }


def bench_text(workdir: Path, mib: int, n_rounds: int, workers: int) -> dict:
    path = repeated_corpus(workdir / "pile-repeated.jsonl", mib)
    tokenizer = load_tokenizer("default")
    size = path.stat().st_size
    result_tokens = {}

    def build() -> None:
        result_tokens["build"] = build_from_text([path], tokenizer, workers=workers).table.tokens

    def tokenize() -> None:
        result_tokens["tokenize"] = tokenize_only(path, tokenizer, workers)

    path.read_bytes()  # into the page cache
    median = rounds({"mia_fast_build": build, "tokenize_only": tokenize}, n_rounds)
    public = public_text_loop(path, tokenizer, PUBLIC_LOOP_DOCUMENTS)
    tokens = result_tokens["build"]
    assert tokens == result_tokens["tokenize"], "counting and tokenizing alone saw different tokens"
    return {
        "bytes": size,
        "tokens": tokens,
        "workers": workers,
        "tokenizer": "built-in SmolLM2-135M",
        "median_seconds": median,
        "tokens_per_second": {name: tokens / s for name, s in median.items()}
        | {"public_loop": public["tokens_per_second"]},
        "megabytes_per_second": {name: size / s / 1e6 for name, s in median.items()},
        "counting_overhead_vs_tokenizing": median["mia_fast_build"] / median["tokenize_only"] - 1,
        "speedup_vs_public_loop": tokens / median["mia_fast_build"] / public["tokens_per_second"],
        "public_loop_documents": PUBLIC_LOOP_DOCUMENTS,
        "public_loop_tokenizing_share": public["tokenizing_share"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of each generated token file")
    parser.add_argument("--text-mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mia-fast-bench",
        help="where the generated inputs are kept",
    )
    parser.add_argument("--only", choices=["tokens", "text"], help="run one half")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    result = {"benchmark": "freq", "machine": machine(), "rounds": args.rounds}
    if args.only != "text":
        result["pre_tokenized"] = bench_tokens(args.workdir, args.gib, args.rounds, cores)
    if args.only != "tokens":
        result["text"] = bench_text(args.workdir, args.text_mib, args.rounds, cores)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"freq-{cores}core.json"
    if out.is_file() and args.only:
        result = json.loads(out.read_text()) | result
    out.write_text(json.dumps(result, indent=2) + "\n")
    for dtype, r in result.get("pre_tokenized", {}).items():
        print(
            f"{dtype}: {r['tokens_per_second']['mia_fast_build_tokens'] / 1e6:.0f}M tok/s, "
            f"{r['speedup_vs_bincount']:.1f}x bincount, "
            f"{r['speedup_vs_public_loop']:.0f}x public loop, {r['fraction_of_read_bandwidth']:.0%} of read bandwidth "
            f"({r['read_bandwidth_bytes_per_second'] / 1e9:.1f} GB/s)"
        )
    if "text" in result:
        t = result["text"]
        print(
            f"text: {t['tokens_per_second']['mia_fast_build'] / 1e6:.2f}M tok/s, "
            f"counting adds {t['counting_overhead_vs_tokenizing']:+.1%} "
            f"over tokenizing alone, {t['speedup_vs_public_loop']:.1f}x the public loop"
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
