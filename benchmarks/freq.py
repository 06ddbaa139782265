"""Frequency-table speed: pre-tokenized counting and text counting, against their baselines, in one run.

    python benchmarks/freq.py [--gib 1.0] [--text-mib 200] [--rounds 3] [--scaling-mib N] [--workdir DIR]

Pre-tokenized: a Zipf-distributed uint16 file (vocabulary 50257) and a uint32 one (151936) of
``--gib`` GiB each. Contenders, interleaved round by round: ``build_from_tokens`` (what
``mia-fast freq build-tokens`` runs), ``numpy.bincount`` on the same memory map, the public
DC-PDD code's Python loop (on a slice, per token), and the machine's read bandwidth: the same file
read through a fresh memory map by as many threads, doing nothing but touching every byte.

Text: the shared pile_test corpus copied to ``--text-mib`` MiB of JSON lines (each copy's documents distinct), and
again with each copy's letters permuted (no word repeats across copies: the tokenizers' caches see fresh text),
tokenized with the built-in model's tokenizer. Contenders, interleaved round by round: ``build_from_text`` (what
``mia-fast freq build`` runs) on 1 and 2 workers; fastokens alone on the same parsed texts, batches and threads;
HF ``tokenizers`` alone (on the first two pieces: it is 20-100x slower); reading and parsing alone; with
``--before``, the build of the commit before issue 55 in its own process; fastokens building its tokenizer; and the
public per-document loop (``tok.encode(text)[:max_tok]`` then ``counts[id] += 1``) on the first documents. Also each
stage's share on one core (read and parse, tokenize, count), decompression throughput (gzip: standard library and
ISA-L; zstd), each round's share of CPU time stolen by the hypervisor, and 2 workers over 1 round by round. With
``--scaling-mib``, builds on 1 and 2 workers alone on a permuted corpus that large, where setup is a small share.

Writes ``results/freq-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import RESULTS, SHARED_DATA, machine

from mia_fast.data import readers
from mia_fast.frequency import counting_tokenizers, text_build
from mia_fast.frequency.build import Counting, count_documents
from mia_fast.frequency.corpus import BadRecords
from mia_fast.frequency.counting_tokenizers import (
    FastokensCounter,
    RustCounter,
    one_thread_per_worker,
    tokenizer_json,
)
from mia_fast.frequency.pieces import PIECE_BYTES, piece_documents, plan_pieces
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


def cpu_ticks() -> tuple[int, int]:
    """(all CPU ticks, ticks stolen by the hypervisor) since boot, from /proc/stat; (0, 0) elsewhere."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0, 0
    return sum(fields), fields[7] if len(fields) > 7 else 0


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[1] - before[1]) / max(after[0] - before[0], 1)


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


def repeated_corpus(path: Path, mib: int, *, permuted: bool = False) -> Path:
    """pile_test's four subsets as JSON lines, copied until the file holds ``mib`` MiB; each copy's documents start
    with a line of their own, so no input repeats. With ``permuted``, every copy after the first also swaps the
    letters of its words (a permutation of a-z of its own), so no word repeats across copies either: the
    tokenizers' word caches then see text as fresh as a real corpus's."""
    if path.is_file() and path.stat().st_size >= mib * 2**20:
        return path
    files = sorted((SHARED_DATA / "pile_test").glob("*.jsonl.gz"))
    records = [json.loads(line) for f in files for line in gzip.open(f)]
    with open(path, "w", encoding="utf-8") as out:
        written, copy = 0, 0
        while written < mib * 2**20:
            letters = list(string.ascii_lowercase)
            if permuted and copy:
                random.Random(copy).shuffle(letters)
            swap = str.maketrans(string.ascii_letters, "".join(letters) + "".join(letters).upper())
            for index, record in enumerate(records):
                line = json.dumps({"text": f"copy {copy} document {index}\n" + record["text"].translate(swap)}) + "\n"
                out.write(line)
                written += len(line.encode())
            copy += 1
    return path


def parsed_pieces(path: Path) -> list[list[str]]:
    """The documents of every piece of a corpus file, read and parsed as a build reads them."""
    bad = BadRecords()
    return [[text for block in piece_documents(piece, "text", bad) for text in block] for piece in plan_pieces(0, path)]


def read_whole(path: Path) -> None:
    """Reading alone: the file's bytes, in a build's pieces."""
    with open(path, "rb") as f:
        while f.read(PIECE_BYTES):
            pass


def read_and_parse(path: Path) -> int:
    """Reading and parsing alone, as a build does, keeping no text: the documents of a corpus file."""
    bad = BadRecords()
    return sum(len(block) for piece in plan_pieces(0, path) for block in piece_documents(piece, "text", bad))


def tokenize_alone(counter, pieces: list[list[str]], workers: int) -> int:
    """The counting tokenizer alone on texts already in memory, in the build's batches and worker threads."""

    def tokenize(texts: list[str]) -> int:
        return sum(len(counter.encode(batch)[0]) for batch in text_build.document_batches([texts]))

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(tokenize, pieces))


def decompression(path: Path, workdir: Path) -> dict[str, float]:
    """MB/s of decompressed corpus out of gzip (the standard library's and ISA-L's) and zstd, on the first 64 MiB."""
    data = path.read_bytes()[: 64 << 20]
    gz, zst = workdir / "sample.jsonl.gz", workdir / "sample.jsonl.zst"
    gz.write_bytes(gzip.compress(data, 6))
    zst.write_bytes(readers.ZSTD.compress(data, 3))
    rates = {}
    for name, target, opener in (
        ("gzip_stdlib", gz, lambda p: gzip.open(p, "rb")),
        ("gzip_isal", gz, lambda p: readers.GZIP.open(p, "rb")),
        ("zstd", zst, lambda p: readers.ZSTD.open(p, "rb")),
    ):
        started = time.perf_counter()
        with opener(target) as f:
            while f.read(8 << 20):
                pass
        rates[name] = len(data) / (time.perf_counter() - started) / 1e6
    return rates


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


def before_build(before: Path, python: str, path: Path, workers: int) -> float:
    """Seconds of ``build_from_text`` as the checkout ``before`` has it (its tokenizer loaded first, not timed)."""
    code = (
        "import sys, time; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "
        "'ScikitBuildRedirectingFinder']; from mia_fast.pipeline.models import load_tokenizer; "
        "from mia_fast.frequency.text_build import build_from_text; tok = load_tokenizer('default'); "
        f"t = time.perf_counter(); build_from_text([{str(path)!r}], tok, workers={workers}); "
        "print(time.perf_counter() - t)"
    )
    environment = USER_ENVIRONMENT | {"PYTHONPATH": str(before)}  # as a user runs it, without the build's settings
    done = subprocess.run([python, "-c", code], env=environment, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def scaling(one: list[float], two: list[float], counting: dict[int, list[float]]) -> dict:
    """2 workers over 1, whole builds and their counting alone, round by round (the two builds of a round ran one
    after the other, so each ratio saw the same machine) and their medians."""
    whole = [a / b for a, b in zip(one, two)]
    counted = [a / b for a, b in zip(counting[1], counting[2])]
    return {
        "two_workers_over_one_by_round": whole,
        "counting_two_workers_over_one_by_round": counted,
        "two_workers_over_one_median_of_rounds": statistics.median(whole),
        "counting_two_workers_over_one_median_of_rounds": statistics.median(counted),
    }


def bench_scaling(path: Path, tokenizer, n_rounds: int) -> dict:
    """Builds on 1 and 2 workers alone, interleaved, on a corpus large enough that setup is a small share."""
    path.read_bytes()
    times: dict[int, list[float]] = {1: [], 2: []}
    counting: dict[int, list[float]] = {1: [], 2: []}
    steals = []
    for r in range(n_rounds):
        ticks = cpu_ticks()
        for workers in (1, 2):
            counting_tokenizers.forget_loaded()
            started = time.perf_counter()
            report = build_from_text([path], tokenizer, workers=workers)
            times[workers].append(time.perf_counter() - started)
            counting[workers].append(report.counting_seconds)
            print(f"{path.name} round {r + 1}: {workers} workers {times[workers][-1]:.2f}s", file=sys.stderr)
        steals.append(steal_share(ticks, cpu_ticks()))
    return {
        "bytes": path.stat().st_size,
        "tokens": report.table.tokens,
        "rounds": n_rounds,
        "steal_share": steals,
        "seconds": {f"{w}_workers": t for w, t in times.items()},
        "counting_seconds": {f"{w}_workers": t for w, t in counting.items()},
    } | scaling(times[1], times[2], counting)


def bench_corpus(path: Path, tokenizer, n_rounds: int, before: Path | None, before_python: str) -> dict:
    """The contenders on one corpus file, interleaved round by round."""
    path.read_bytes()  # into the page cache
    size = path.stat().st_size
    spec = tokenizer_json(tokenizer)
    pieces = parsed_pieces(path)
    first_pieces = pieces[:2]  # the tokenizers library alone runs on the first two pieces, one per worker
    tokens: dict[str, int] = {}
    counting: dict[int, list[float]] = {1: [], 2: []}  # of each build, the seconds after the tokenizers' check
    setup: dict[int, list[float]] = {1: [], 2: []}  # and before it: settings, the check, loading fastokens

    # Every contender tokenizes with a tokenizer of its own, built anew: the libraries' word caches would carry one
    # contender's warm-up into the next. A build loads its own (timed, as a user's build does); a library alone is
    # loaded before the clock starts.
    def build(workers: int) -> float:
        counting_tokenizers.forget_loaded()
        started = time.perf_counter()
        report = build_from_text([path], tokenizer, workers=workers)
        tokens["build"] = report.table.tokens
        counting[workers].append(report.counting_seconds)
        setup[workers].append(report.seconds - report.counting_seconds)
        return time.perf_counter() - started

    def alone(name: str, library, texts: list[list[str]], workers: int) -> float:
        counter = library(spec)
        started = time.perf_counter()
        tokens[name] = tokenize_alone(counter, texts, workers)
        return time.perf_counter() - started

    contenders = {
        "build_1_worker": lambda: build(1),
        "build_2_workers": lambda: build(2),
        "fastokens_alone_1": lambda: alone("fast", FastokensCounter, pieces, 1),
        "fastokens_alone_2": lambda: alone("fast", FastokensCounter, pieces, 2),
        "tokenizers_alone_2_first_pieces": lambda: alone("exact", RustCounter, first_pieces, 2),
        "read_and_parse_1": lambda: timed(lambda: read_and_parse(path)),
        "fastokens_load": lambda: timed(lambda: FastokensCounter(spec)),
    }
    if before is not None:
        contenders["before_build_2_workers"] = lambda: before_build(before, before_python, path, 2)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    loads, steals = [], []
    for r in range(n_rounds):
        loads.append(os.getloadavg()[0])
        ticks = cpu_ticks()
        for name, fn in contenders.items():
            seconds = fn()
            times[name].append(seconds)
            print(f"{path.name} round {r + 1}: {name} {seconds:.2f}s", file=sys.stderr)
        steals.append(steal_share(ticks, cpu_ticks()))
    median = {name: statistics.median(t) for name, t in times.items()}
    n = tokens["build"]
    assert n == tokens["fast"], "the build and fastokens alone saw different tokens"
    rates = {name: n / s for name, s in median.items() if not name.startswith(("tokenizers", "fastokens_load"))}
    rates["tokenizers_alone_2_first_pieces"] = tokens["exact"] / median["tokenizers_alone_2_first_pieces"]
    entry = {
        "bytes": size,
        "tokens": n,
        "rounds": n_rounds,
        "load_average_1min": loads,
        "steal_share": steals,
        "median_seconds": median,
        "all_seconds": times,
        "tokens_per_second": rates,
        "megabytes_per_second": {
            name: size / s / 1e6 for name, s in median.items() if "first_pieces" not in name and "load" not in name
        },
        "build_over_fastokens_alone_2_workers": median["build_2_workers"] / median["fastokens_alone_2"],
        "build_over_fastokens_alone_1_worker": median["build_1_worker"] / median["fastokens_alone_1"],
        "two_workers_over_one": median["build_1_worker"] / median["build_2_workers"],
        "build_counting_seconds": {f"{w}_workers": statistics.median(t) for w, t in counting.items()},
        "build_setup_seconds": {f"{w}_workers": statistics.median(t) for w, t in setup.items()},
        "build_over_fastokens_alone_and_its_load_2_workers": median["build_2_workers"]
        / (median["fastokens_alone_2"] + median["fastokens_load"]),
    } | scaling(times["build_1_worker"], times["build_2_workers"], counting)
    counted = entry["build_counting_seconds"]
    entry["counting_over_fastokens_alone_2_workers"] = counted["2_workers"] / median["fastokens_alone_2"]
    entry["counting_over_fastokens_alone_1_worker"] = counted["1_workers"] / median["fastokens_alone_1"]
    entry["counting_two_workers_over_one"] = counted["1_workers"] / counted["2_workers"]
    if before is not None:
        entry["speedup_vs_before_2_workers"] = median["before_build_2_workers"] / median["build_2_workers"]
    fast = FastokensCounter(spec)
    encoded = [fast.encode(batch) for texts in pieces for batch in text_build.document_batches([texts])]
    started = time.perf_counter()
    for ids, offsets in encoded:
        count_documents(ids, offsets, len(tokenizer), threads=1)
    read = timed(lambda: read_whole(path))
    stages = {
        "read": read,
        "parse": max(median["read_and_parse_1"] - read, 0.0),
        "tokenize": median["fastokens_alone_1"],
        "count": time.perf_counter() - started,
    }
    entry["stages_one_core"] = {
        name: {"seconds": t, "share": t / sum(stages.values()), "megabytes_per_second": size / max(t, 1e-9) / 1e6}
        for name, t in stages.items()
    }
    entry["tokens_per_second_per_core"] = {
        "fastokens": n / median["fastokens_alone_1"],
        "tokenizers": rates["tokenizers_alone_2_first_pieces"] / 2,
        "build": n / median["build_1_worker"],
    }
    return entry


# The environment before this process kept its tokenizer libraries to one thread each: the build before ran as users ran
# it, with the libraries' own thread pools.
USER_ENVIRONMENT = dict(os.environ)


def bench_text(
    workdir: Path, mib: int, n_rounds: int, before: Path | None, before_python: str, scaling_mib: int | None
) -> dict:
    one_thread_per_worker()
    tokenizer = load_tokenizer("default")
    result = {"tokenizer": "built-in SmolLM2-135M", "before": str(before) if before else None}
    for corpus, permuted in (("repeated", False), ("permuted", True)):
        path = repeated_corpus(workdir / f"pile-{corpus}-{mib}.jsonl", mib, permuted=permuted)
        result[corpus] = bench_corpus(
            path, tokenizer, n_rounds, before if corpus == "repeated" else None, before_python
        )
    if scaling_mib:
        large = repeated_corpus(workdir / f"pile-permuted-{scaling_mib}.jsonl", scaling_mib, permuted=True)
        result["scaling_permuted"] = bench_scaling(large, tokenizer, n_rounds)
    result["decompression_megabytes_per_second"] = decompression(path, workdir)
    public = public_text_loop(path, tokenizer, PUBLIC_LOOP_DOCUMENTS)
    result["public_loop"] = public
    build_rate = result["repeated"]["tokens_per_second"]["build_2_workers"]
    result["speedup_2_workers_vs_public_loop"] = build_rate / public["tokens_per_second"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="size of each generated token file")
    parser.add_argument("--text-mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scaling-mib", type=int, help="also time builds on 1 and 2 workers alone on a permuted corpus this large"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "mia-fast-bench",
        help="where the generated inputs are kept",
    )
    parser.add_argument("--only", choices=["tokens", "text"], help="run one half")
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of the commit before issue 55, importable (its compiled core in its package): its build "
        "runs beside this one, in its own process, on the same corpus",
    )
    parser.add_argument("--before-python", default=sys.executable, help="the Python that imports --before")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    result = {"benchmark": "freq", "machine": machine(), "rounds": args.rounds}
    if args.only != "text":
        result["pre_tokenized"] = bench_tokens(args.workdir, args.gib, args.rounds, cores)
    if args.only != "tokens":
        result["text"] = bench_text(
            args.workdir, args.text_mib, args.rounds, args.before, args.before_python, args.scaling_mib
        )
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
        for corpus in ("repeated", "permuted"):
            t = result["text"][corpus]
            rate = t["tokens_per_second"]
            print(
                f"text ({corpus}): build {rate['build_1_worker'] / 1e6:.1f}M tok/s on 1 worker, "
                f"{rate['build_2_workers'] / 1e6:.1f}M on 2 ({t['two_workers_over_one']:.2f}x); "
                f"build / fastokens alone {t['build_over_fastokens_alone_2_workers']:.2f} on 2 workers"
                + (
                    f"; {t['speedup_vs_before_2_workers']:.1f}x the build before"
                    if "speedup_vs_before_2_workers" in t
                    else ""
                )
            )
        if "scaling_permuted" in result["text"]:
            t = result["text"]["scaling_permuted"]
            print(
                f"scaling ({t['bytes'] / 1e6:.0f} MB permuted): 2 workers / 1 worker "
                f"{t['two_workers_over_one_median_of_rounds']:.2f}x whole, "
                f"{t['counting_two_workers_over_one_median_of_rounds']:.2f}x counting (medians of rounds)"
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
