"""The GPU check in one call: end-to-end scoring at three model shapes and ReCaLL's prefixed pass, then the kernels
(token_stats, the fused head path, the aggregations), with the issue's goals printed as a table.

    python3 -P benchmarks/kernels.py [--only SECTIONS] [--budget SECONDS] [--out DIR]
        on a CUDA machine: writes results/kernels-<device>.json and .png (see benchmarks/README.md for a fresh
        machine without a network)
    python benchmarks/kernels.py --smoke --out DIR
        every section on tiny shapes, on the CPU under TRITON_INTERPRET=1: checks that it all runs (no timing claims)

Nothing is read from outside the checkout and nothing from the hub: the texts are drawn from the docstrings of this
Python's standard library (``mia_fast.evaluation.corpus.stdlib_corpus``, the demo's corpus), a BPE tokenizer is
trained on them, and the models are random-initialised on the device in bf16 at the shapes of Llama-3.2-1B,
Llama-3-8B and Pythia-6.9B (their own ``_init_weights``: normal(0, 0.02) weights, made on the GPU in bf16, no fp32
copy). Every contender runs in the same process on the same inputs. Times are medians: CUDA events for the kernels,
wall time around a synchronised call end to end. The run keeps to ``--budget`` seconds (process start to the last
file written): each section has a share, its repetitions stop when its share is spent (one timed run at the least,
after a warm-up that also gives the scores and the peak memory), and a section is skipped when too little is left.

An error in one section (or one contender) is recorded in the JSON and the run goes on; the JSON is written after
every section, and on SIGTERM (``timeout``) the JSON and PNG are written with what was measured.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
# `python3 -P` puts no script folder on sys.path: common.py and reference_loop.py are found here explicitly (only this
# folder: the repository root holds a mia_fast without its compiled module, and kernels/ would shadow packages).
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from common import RESULTS, machine  # noqa: E402
from reference_loop import public_loop_scores  # noqa: E402

import mia_fast  # noqa: E402
from mia_fast import ComputeConfig, DcpddSettings, Detector, LoadedModel, ModelConfig, kernels  # noqa: E402
from mia_fast.engines.stats import TOKEN_STATS_COLUMNS, TokenStats  # noqa: E402
from mia_fast.evaluation.corpus import stdlib_corpus  # noqa: E402
from mia_fast.frequency.build import count_token_ids  # noqa: E402
from mia_fast.kernels import token_stats  # noqa: E402
from mia_fast.methods import DEFAULT_KS  # noqa: E402
from mia_fast.ops.bottom_k import bottom_k_counts, bottom_k_means  # noqa: E402
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean  # noqa: E402
from mia_fast.ops.token_stats import linear_token_stats, token_stats_torch  # noqa: E402
from mia_fast.pipeline.engine import DEFAULT_CHUNK_BYTES, MIN_HEAD_ROWS  # noqa: E402

# Sections in the order they run: the end-to-end goals first, so that a run cut short still has them.
SECTIONS = ("e2e_llama_8b", "e2e_recall", "e2e_llama_1b", "e2e_pythia_6.9b", "token_stats", "fused", "aggregation")
E2E_SECTIONS = ("e2e_llama_1b", "e2e_llama_8b", "e2e_pythia_6.9b")
ONE_PASS_METHODS = ["loss", "zlib", "mink", "minkpp", "dcpdd"]
E2E_CONTENDERS = ("mia_fast", "mia_fast_model_forward", "public_loop", "floor")
WALL_LIMIT_S = 480  # the limit on the whole run (the GPU session runs it under `timeout 480`)

LLAMA_3_2_1B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    tie_word_embeddings=True,
)
LLAMA_3_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    tie_word_embeddings=False,
)
PYTHIA_6_9B = dict(
    hidden_size=4096,
    intermediate_size=16384,
    num_hidden_layers=32,
    num_attention_heads=32,
    vocab_size=50432,
    rotary_pct=0.25,
    rotary_emb_base=10000,
    use_parallel_residual=True,
    max_position_embeddings=2048,
    hidden_act="gelu",
    layer_norm_eps=1e-5,
    tie_word_embeddings=False,
)
TINY_LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=1000,
    max_position_embeddings=256,
    tie_word_embeddings=True,
)
TINY_LLAMA_UNTIED = {
    **TINY_LLAMA,
    "intermediate_size": 160,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
TINY_NEOX = dict(
    hidden_size=64,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=1000,
    rotary_pct=0.25,
    use_parallel_residual=True,
    max_position_embeddings=64,
    hidden_act="gelu",
    tie_word_embeddings=False,
)

# Seconds each section may take (model making, compiles and warm-ups included), from the figures for an
# H100: the 8B shape's 64 texts of ~3,078 tokens took 6.6 s (floor), 7.7 s (public loop), 8.0 s (mia-fast) a run; the
# 1B shape scored ~117k tokens/s; a cold torch.compile of the eager recipe took ~20 s (compile_s, the planned cost of
# each until the run has measured its first). setup_s: imports, texts, tokenizer and the copy rate; finish_s: the
# goals, the plot and the files. The plan printed at the start (plan()) adds these up for the device at hand.
FULL = dict(
    stats_rows=[4096, 32768],
    stats_vocab=[32000, 128256, 151936],
    stats_reps=10,
    fused_hidden=[2048, 4096],
    fused_vocab=[128256, 151936],
    fused_rows=[4096, 32768],
    fused_chunk_mb=[64, 256, 1024],
    fused_reps=5,
    aggregation_tokens=10_000_000,
    aggregation_reps=(3, 10),  # numpy, kernels
    tokenizer_vocab=32000,
    small=dict(family="llama", shape=LLAMA_3_2_1B, label="Llama-3.2-1B", texts=512, words=400),
    large=dict(family="llama", shape=LLAMA_3_8B, label="Llama-3-8B", texts=64, tokens=(1000, 6000)),
    neox=dict(family="gpt_neox", shape=PYTHIA_6_9B, label="Pythia-6.9B"),
    prefix_tokens=600,
    e2e_reps=2,
    recall_reps=2,
    shares={
        "e2e_llama_8b": 110,
        "e2e_recall": 45,
        "e2e_llama_1b": 50,
        "e2e_pythia_6.9b": 75,
        "token_stats": 75,
        "fused": 30,
        "aggregation": 20,
    },
    compile_s=20,
    setup_s=25,
    finish_s=10,
    budget=450,
)
SMOKE = dict(
    stats_rows=[33, 40],
    stats_vocab=[1000, 5003],
    stats_reps=1,
    fused_hidden=[32],
    fused_vocab=[1000],
    fused_rows=[77],
    fused_chunk_mb=[0.05],
    fused_reps=1,
    aggregation_tokens=5_000,
    aggregation_reps=(1, 1),
    tokenizer_vocab=1000,
    small=dict(family="llama", shape=TINY_LLAMA, label="tiny llama", texts=6, words=30),
    large=dict(family="llama", shape=TINY_LLAMA_UNTIED, label="tiny untied llama", texts=5, tokens=(40, 150)),
    neox=dict(family="gpt_neox", shape=TINY_NEOX, label="tiny gpt_neox"),
    prefix_tokens=24,
    e2e_reps=1,
    recall_reps=1,
    shares={name: 60 for name in SECTIONS},
    compile_s=20,
    setup_s=30,
    finish_s=10,
    budget=600,
)


# ---------------------------------------------------------------------------------------------------------- helpers


def elapsed() -> float:
    return time.perf_counter() - STARTED


def log(message: str) -> None:
    print(f"[{elapsed():6.1f} s] {message}", file=sys.stderr, flush=True)


# The result of the section in progress, filled as it goes: what a SIGTERM in the middle of it still keeps.
LIVE: dict[str, dict] = {}


class Terminated(BaseException):
    """SIGTERM (``timeout``): raised where the run is, so that what was measured is still written."""


def on_sigterm(signum, frame) -> None:
    raise Terminated(f"terminated by signal {signum} after {elapsed():.0f} s")


def describe_error(exc: BaseException) -> str:
    if out_of_memory(exc):
        return f"out of memory: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            began = time.perf_counter()
            fn()
            times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def peak_extra_bytes(fn: Callable[[], object], device: torch.device) -> int | None:
    """Peak memory allocated by ``fn`` beyond what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    synchronize(device)
    return torch.cuda.max_memory_allocated() - base


def out_of_memory(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def measure(fn: Callable[[], object], device: torch.device, reps: int) -> dict:
    """Median time and peak extra memory of ``fn``, or ``{"error": ...}`` when it does not fit or fails."""
    try:
        peak = peak_extra_bytes(fn, device)
        return {"ms": median_ms(fn, device, reps), "peak_extra_bytes": peak}
    except Exception as exc:
        error = "oom" if out_of_memory(exc) else describe_error(exc)
    free_memory()
    return {"error": error}


def report(label: str, contenders: dict[str, dict]) -> None:
    log(
        f"{label}: "
        + ", ".join(
            f"{name} {r['ms']:.3f} ms" if "ms" in r else f"{name} {r.get('error')}" for name, r in contenders.items()
        )
    )


def copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    """Device-to-device copy bandwidth, bytes read + written per second."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), device, max(reps, 3))
    return 2 * nbytes / (ms / 1e3)


# ----------------------------------------------------------------------------------------------------- token_stats


def eager_token_stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The public Min-K%++ recipe: fp32 upcast, softmax, log_softmax, products and sums."""
    logits = logits.float()
    probs = torch.softmax(logits, -1)
    log_probs = torch.log_softmax(logits, -1)
    mu = (probs * log_probs).sum(-1)
    var = (probs * log_probs.square()).sum(-1) - mu.square()
    return log_probs.gather(-1, targets[:, None])[:, 0], mu, var, log_probs.amax(-1)


def fp64_token_stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    log_probs = torch.log_softmax(logits.double(), -1)
    probs = log_probs.exp()
    mu = torch.where(probs > 0, probs * log_probs, 0).sum(-1)
    var = torch.where(probs > 0, probs * (log_probs - mu[:, None]) ** 2, 0).sum(-1)
    return log_probs.gather(-1, targets[:, None])[:, 0], mu, var, log_probs.amax(-1)


def max_abs_errors(got, truth) -> dict[str, float]:
    return {
        name: float((g.double() - t.double()).abs().max())
        for name, g, t in zip(TOKEN_STATS_COLUMNS, got, truth, strict=True)
    }


def compiled_eager() -> Callable:
    """The eager recipe through torch.compile, in a fresh cache (no recompile limit hit): called on inputs whose N is
    marked dynamic (:func:`token_stats_row`), one compile serves every N of a vocabulary."""
    torch.compiler.reset()
    return torch.compile(eager_token_stats)


def compiled_graphs() -> int:
    """The graphs dynamo has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def token_stats_row(
    n: int, vocab: int, device: torch.device, copy_bps: float, compiled: Callable | None, reps: int
) -> dict:
    """One shape of the token_stats benchmark (``compiled``: the torch.compile contender, or None); its tensors are
    freed when it returns."""
    logits = (torch.randn(n, vocab, device=device) * 3).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (n,), device=device)
    contenders = {
        "kernel": partial(token_stats, logits, targets),
        "eager": partial(eager_token_stats, logits, targets),
        "torch_reference": partial(token_stats_torch, logits, targets),
    }
    row: dict = {"n": n, "vocab": vocab, "logits_bytes": logits.numel() * logits.element_size()}
    if compiled is not None:
        from torch._dynamo import mark_dynamic

        mark_dynamic(logits, 0)
        mark_dynamic(targets, 0)
        contenders["compile"] = partial(compiled, logits, targets)
        # The first call of a vocabulary compiles; a later N that compiled again would show here.
        began = time.perf_counter()
        try:
            contenders["compile"]()
            synchronize(device)
            row["compile_first_call_s"] = time.perf_counter() - began
        except Exception as exc:
            row["compile_error"] = describe_error(exc)
            del contenders["compile"], exc
            free_memory()
    # Accuracy on real hardware, on a slice small enough for an fp64 copy.
    head, head_targets = logits[:256], targets[:256]
    truth = fp64_token_stats(head, head_targets)
    row["max_abs_error_vs_fp64"] = {
        "kernel": max_abs_errors(token_stats(head, head_targets), truth),
        "eager": max_abs_errors(eager_token_stats(head, head_targets), truth),
    }
    row["contenders"] = times = {name: measure(fn, device, reps) for name, fn in contenders.items()}
    if "compile_error" in row:
        times["compile"] = {"error": row["compile_error"]}
    for result in times.values():
        if "ms" in result:
            result["GBps"] = row["logits_bytes"] / (result["ms"] / 1e3) / 1e9
            result["fraction_of_copy_bandwidth"] = result["GBps"] * 1e9 / copy_bps
    if "ms" in times["kernel"]:
        row["kernel_speedup"] = {
            name: times[name]["ms"] / times["kernel"]["ms"] for name in times if "ms" in times[name]
        }
    report(f"token_stats N={n} V={vocab}", times)
    return row


def bench_token_stats(
    config: dict, device: torch.device, copy_bps: float, deadline: float, *, use_compile: bool
) -> dict:
    """Every shape; the torch.compile contender compiled once per vocabulary, and only when its cost (the first
    compile's, measured, or the planned ``compile_s`` before it) still fits before ``deadline``: a vocabulary left
    without it is recorded in ``budget_notes`` and logged."""
    rows, notes, compiles = [], [], []
    compile_s = config["compile_s"]
    for vocab in config["stats_vocab"]:
        compiled = None
        if use_compile:
            left = deadline - time.perf_counter()
            if left >= compile_s:
                compiled = compiled_eager()
            else:
                notes.append(
                    f"V={vocab}: torch.compile left out, {max(left, 0):.0f} s of the section's share left for a "
                    f"compile planned at {compile_s:.0f} s"
                )
                log(f"token_stats {notes[-1]}")
        graphs_before = compiled_graphs()
        for n in config["stats_rows"]:
            try:
                row = token_stats_row(n, vocab, device, copy_bps, compiled, config["stats_reps"])
            except Exception as exc:
                row = {"n": n, "vocab": vocab, "error": describe_error(exc), "contenders": {}}
            rows.append(row)
            free_memory()
        first_calls = [r["compile_first_call_s"] for r in rows if r["vocab"] == vocab and "compile_first_call_s" in r]
        if compiled is not None and first_calls:
            compile_s = max(first_calls)
            compiles.append({"vocab": vocab, "seconds": compile_s, "graphs": compiled_graphs() - graphs_before})
    return {"copy_bandwidth_bps": copy_bps, "rows": rows, "compiles": compiles, "budget_notes": notes}


# ---------------------------------------------------------------------------------------------------------- fused


def fused_row(n: int, weight: torch.Tensor, chunk_mb: list[float], reps: int) -> dict:
    """One shape of the head + statistics benchmark; its tensors are freed when it returns."""
    vocab, hidden_size = weight.shape
    hidden = torch.randn(n, hidden_size, device=weight.device).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (n,), device=weight.device)
    contenders = {
        "matmul_then_kernel": lambda: token_stats(hidden @ weight.T, targets),
        "eager": lambda: eager_token_stats(hidden @ weight.T, targets),
    }
    for mb in chunk_mb:
        chunk_rows = max(1, int(mb * 2**20) // (vocab * 2))
        contenders[f"fused_chunk_{mb}MB"] = partial(
            linear_token_stats, hidden, weight, targets, chunk_rows=chunk_rows, backend="triton"
        )
    # The chunking the engine itself uses on this device (StatsEngine: chunk_bytes of fp32 logits, MIN_HEAD_ROWS).
    stats_rows = max(1, DEFAULT_CHUNK_BYTES.get(weight.device.type, DEFAULT_CHUNK_BYTES["cuda"]) // (4 * vocab))
    contenders["fused_engine_default"] = partial(
        linear_token_stats,
        hidden,
        weight,
        targets,
        chunk_rows=max(stats_rows, MIN_HEAD_ROWS),
        stats_rows=stats_rows,
        backend="triton",
    )
    row: dict = {"n": n, "hidden": hidden_size, "vocab": vocab}
    row["max_abs_diff_fused_vs_matmul_then_kernel"] = max_abs_errors(
        contenders[f"fused_chunk_{chunk_mb[0]}MB"](), token_stats(hidden @ weight.T, targets)
    )
    row["contenders"] = {name: measure(fn, weight.device, reps) for name, fn in contenders.items()}
    report(f"fused N={n} H={hidden_size} V={vocab}", row["contenders"])
    return row


def bench_fused(config: dict, device: torch.device, deadline: float) -> dict:
    rows, notes = [], []
    for hidden_size in config["fused_hidden"]:
        for vocab in config["fused_vocab"]:
            weight = (torch.randn(vocab, hidden_size, device=device) * 0.02).to(torch.bfloat16)
            for n in config["fused_rows"]:
                reps = config["fused_reps"] if time.perf_counter() < deadline else 1
                if reps < config["fused_reps"]:
                    notes.append(f"N={n} H={hidden_size} V={vocab}: 1 timed run, the section's time share was spent")
                try:
                    rows.append(fused_row(n, weight, config["fused_chunk_mb"], reps))
                except Exception as exc:
                    rows.append({"n": n, "hidden": hidden_size, "vocab": vocab, "error": describe_error(exc)})
                free_memory()
            del weight
            free_memory()
    return {"rows": rows, "budget_notes": notes}


# ---------------------------------------------------------------------------------------------------- aggregation


def synthetic_stats(n_tokens: int, vocab: int, seed: int = 0) -> TokenStats:
    """Texts of 20..2000 tokens with Zipf ids and realistic value ranges (the methods benchmark's data)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 2000, max(1, n_tokens // 1010))
    split = np.cumsum(lengths)[:-1]
    n = int(lengths.sum())
    arrays = dict(
        target_ids=(rng.zipf(1.2, n) - 1) % vocab,
        logp=-rng.exponential(3.0, n).astype(np.float32),
        mu=-rng.uniform(0.5, 6.0, n).astype(np.float32),
        var=rng.uniform(0.1, 8.0, n).astype(np.float32),
    )
    return TokenStats.from_texts(
        [dict(zip(arrays, parts)) for parts in zip(*(np.split(a, split) for a in arrays.values()))]
    )


def bench_aggregation(config: dict, device: torch.device) -> dict:
    vocab = 128256
    stats = synthetic_stats(config["aggregation_tokens"], vocab)
    log_f = np.log(np.random.default_rng(1).dirichlet(np.ones(vocab)))
    counts = bottom_k_counts(stats.lengths, DEFAULT_KS)
    on_device = {
        name: torch.from_numpy(np.ascontiguousarray(a)).to(device)
        for name, a in dict(
            logp=stats.logp,
            ids=stats.target_ids,
            first=stats.first_occurrence,
            offsets=stats.offsets,
            counts=counts,
            log_f=log_f,
        ).items()
    }
    contenders = {
        "bottom_k_10ks_numpy": lambda: bottom_k_means(stats.logp, stats.offsets, DEFAULT_KS),
        "bottom_k_10ks_kernel": lambda: kernels.bottom_k_means(
            on_device["logp"], on_device["offsets"], on_device["counts"]
        ),
        "dcpdd_numpy": lambda: capped_first_occurrence_mean(
            stats.target_ids, stats.logp, stats.first_occurrence, stats.offsets, log_f, 0.01
        ),
        "dcpdd_kernel": lambda: kernels.capped_first_occurrence_mean(
            on_device["ids"], on_device["logp"], on_device["first"], on_device["offsets"], on_device["log_f"], 0.01
        ),
    }
    result: dict = {"tokens": int(stats.offsets[-1]), "texts": len(stats), "vocab": vocab}
    result["max_abs_diff_kernel_vs_numpy"] = {
        "bottom_k": float(
            np.abs(contenders["bottom_k_10ks_kernel"]().cpu().numpy() - contenders["bottom_k_10ks_numpy"]()).max()
        ),
        "dcpdd": float(np.abs(contenders["dcpdd_kernel"]().cpu().numpy() - contenders["dcpdd_numpy"]()).max()),
    }
    numpy_reps, kernel_reps = config["aggregation_reps"]
    result["contenders"] = {
        name: {
            "ms": median_ms(
                fn,
                torch.device("cpu") if "numpy" in name else device,
                numpy_reps if "numpy" in name else kernel_reps,
            )
        }
        for name, fn in contenders.items()
    }
    report("aggregation", result["contenders"])
    return result


# ----------------------------------------------------------------------------------------------- texts and models


def train_tokenizer(docs: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on ``docs`` (ids below ``vocab_size``; every model's vocabulary is larger
    or equal, so its head keeps its full size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(docs, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="</s>")


def doc_cycles(docs: list[str], seed: int):
    """The docstrings again and again, each cycle in another seeded order: a deterministic endless stream."""
    rng = np.random.default_rng(seed)
    while True:
        for i in rng.permutation(len(docs)):
            yield docs[i]


def word_texts(docs: list[str], n: int, words: int, seed: int = 0) -> list[str]:
    """``n`` texts of ``words`` words each, cut one after another from the docstring stream."""
    stream: list[str] = []
    source = doc_cycles(docs, seed)
    while len(stream) < n * words:
        stream += next(source).split()
    return [" ".join(stream[i * words : (i + 1) * words]) for i in range(n)]


def token_lengths(n: int, low: int, high: int, seed: int = 1) -> list[int]:
    """``n`` lengths from ``low`` to ``high`` skewed to the short end (mean low + 0.4 (high - low): ~3,000 for
    1,000..6,000), in a seeded order."""
    quantiles = ((np.arange(n) + 0.5) / n) ** 1.5
    lengths = (low + (high - low) * quantiles).astype(int)
    return np.random.default_rng(seed).permutation(lengths).tolist()


def token_texts(docs: list[str], tokenizer, lengths: list[int], seed: int = 2) -> list[str]:
    """Texts of about ``lengths`` tokens (decoded from consecutive slices of the tokenized docstring stream)."""
    stream: list[int] = []
    source = doc_cycles(docs, seed)
    while len(stream) < sum(lengths) + 1:
        stream += tokenizer.encode(next(source) + "\n\n")
    offsets = np.cumsum([0, *lengths])
    return [tokenizer.decode(stream[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]


def cut_to_context(tokenizer, texts: list[str], context: int) -> list[str]:
    """Each text cut to at most ``context`` tokens (what the per-text floor and the public loop can run at once)."""
    cut = []
    for text in texts:
        ids = tokenizer.encode(text)
        keep = context
        # Decoding a cut and encoding it again may merge ids differently: cut further until it fits.
        while len(tokenizer.encode(text)) > context:
            text = tokenizer.decode(ids[:keep])
            keep -= 16
        cut.append(text)
    return cut


def build_model(
    family: str, shape: dict, tokenizer, device: torch.device, label: str, dtype: torch.dtype | None = None
) -> LoadedModel:
    """A random-initialised model of ``shape`` made on ``device`` directly in its dtype (bf16 on a GPU, fp32 on a
    CPU): the default dtype is set while the model is made, so no fp32 copy is ever materialised, and the model's own
    ``_init_weights`` (normal(0, 0.02)) runs on the device."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if family == "llama":
        config, model_class = LlamaConfig(**shape, **special), LlamaForCausalLM
    else:
        config, model_class = GPTNeoXConfig(**shape, **special), GPTNeoXForCausalLM
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = model_class(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name=f"random {label}", device=device, dtype=dtype)


def model_facts(loaded: LoadedModel) -> dict:
    config = loaded.model.config
    parameters = list(loaded.model.parameters())
    facts = {
        "model_type": config.model_type,
        "parameters": sum(p.numel() for p in parameters),
        "weights_bytes": sum(p.numel() * p.element_size() for p in parameters),
        "dtype": str(loaded.dtype),
        "context": loaded.context_length,
        "attention_implementation": getattr(config, "_attn_implementation", None),
    }
    rope = getattr(config, "rope_parameters", None) or {}
    facts["partial_rotary_factor"] = rope.get("partial_rotary_factor", getattr(config, "rotary_pct", None))
    return facts


def detectors_for(loaded: LoadedModel, texts: list[str]) -> dict[str, Detector]:
    """mia-fast with its defaults, and forced onto the model's own forward; DC-PDD's frequencies counted on the
    texts."""
    ids = np.concatenate([np.asarray(i, np.uint32) for i in loaded.tokenizer(texts)["input_ids"]])
    counts = count_token_ids(ids, loaded.vocab_size)
    quiet = ComputeConfig(progress=False)
    return {
        "mia_fast": Detector(ModelConfig(loaded, prepend_start=False), [DcpddSettings(frequencies=counts)], quiet),
        "mia_fast_model_forward": Detector(
            ModelConfig(loaded, prepend_start=False, forward="model"), [DcpddSettings(frequencies=counts)], quiet
        ),
    }


# ------------------------------------------------------------------------------------------------------ end to end


@torch.inference_mode()
def floor_pass(model: torch.nn.Module, ids: list[torch.Tensor]) -> None:
    """The model's bare forward one text at a time: trunk and head product in its dtype, no statistics, no KV cache
    kept."""
    for row in ids:
        _ = model(input_ids=row, use_cache=False).logits


def rel_diff(ours, theirs) -> float | None:
    """Largest |ours - theirs| relative to the largest |theirs| of the column, over the columns both have."""
    worst = None
    for column in theirs:
        if column not in ours:
            continue
        a, b = np.asarray(ours[column], np.float64), np.asarray(theirs[column], np.float64)
        both = np.isfinite(a) & np.isfinite(b)
        if not both.any():
            continue
        scale = max(float(np.abs(b[both]).max()), 1e-30)
        value = float(np.abs(a[both] - b[both]).max()) / scale
        worst = value if worst is None else max(worst, value)
    return worst


def run_contenders(
    contenders: dict[str, Callable[[], object]],
    device: torch.device,
    reps: int,
    deadline: float,
    label: str,
    *,
    warm: bool = False,
    results: dict[str, dict] | None = None,
) -> tuple[dict[str, dict], dict[str, object]]:
    """A first round that keeps each contender's output and peak memory (a warm-up, or with ``warm``, where every
    contender has run before, the first timed round), then timed rounds up to ``reps``, the contenders interleaved; a
    round starts only when one as long as the last would end before ``deadline`` (one timed round at the least). A
    contender that fails is recorded and left out of the rounds after. ``results`` (filled in place as the rounds go)
    receives each contender's entry."""
    results = {} if results is None else results
    results.update({name: {} for name in contenders})
    first: dict[str, float] = {}
    outputs: dict[str, object] = {}
    for name, fn in contenders.items():
        try:
            free_memory()
            synchronize(device)
            base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            began = time.perf_counter()
            outputs[name] = fn()
            synchronize(device)
            first[name] = time.perf_counter() - began
            results[name]["first_run_s" if warm else "warmup_s"] = first[name]
            if device.type == "cuda":
                results[name]["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
            log(f"{label} {name}: {'first run' if warm else 'warm-up'} {first[name]:.2f} s")
        except Exception as exc:
            results[name]["error"] = describe_error(exc)
            results[name]["traceback"] = traceback.format_exc()[-2000:]
            log(f"{label} {name}: FAILED in the warm-up: {results[name]['error']}")
            traceback.print_exc(file=sys.stderr)
            del exc
            free_memory()
    runs: dict[str, list[float]] = {name: [first[name]] if warm else [] for name in first}
    for name, times in runs.items():
        results[name]["runs_s"] = times  # the same list, filled as the rounds go
    last_round_s = 0.0
    for round_ in range(1 if warm else 0, reps):
        if round_ > 0 and time.perf_counter() + last_round_s > deadline:
            for name in runs:
                results[name]["budget_note"] = (
                    f"{round_} timed run(s) of {reps}: another round would end past the section's time share"
                )
            break
        round_began = time.perf_counter()
        for name in list(runs):
            try:
                synchronize(device)
                began = time.perf_counter()
                contenders[name]()
                synchronize(device)
                runs[name].append(time.perf_counter() - began)
            except Exception as exc:
                results[name]["error"] = describe_error(exc)
                log(f"{label} {name}: FAILED in a timed run: {results[name]['error']}")
                del runs[name], exc
                free_memory()
        last_round_s = time.perf_counter() - round_began
    for name, times in runs.items():
        if times:
            results[name]["seconds"] = statistics.median(times)
    return results, outputs


def e2e_section(
    loaded: LoadedModel,
    detectors: dict[str, Detector],
    texts: list[str],
    reps: int,
    deadline: float,
    label: str,
) -> dict:
    """Tokens/s of mia-fast (defaults), mia-fast on the model's own forward, the public per-text loop and the per-text
    floor; texts longer than the model's context run windowed in mia-fast and cut to the context elsewhere."""
    device, tokenizer, model = loaded.device, loaded.tokenizer, loaded.model
    context = loaded.context_length
    text_ids = tokenizer(texts)["input_ids"]
    cut = any(len(ids) > context for ids in text_ids)
    loop_texts = cut_to_context(tokenizer, texts, context) if cut else texts
    loop_ids = [tokenizer.encode(t) for t in loop_texts]
    loop_rows = [torch.tensor(ids, device=device)[None] for ids in loop_ids]
    contenders = {
        "mia_fast": lambda: detectors["mia_fast"].score(texts, ONE_PASS_METHODS, DEFAULT_KS),
        "mia_fast_model_forward": lambda: detectors["mia_fast_model_forward"].score(
            texts, ONE_PASS_METHODS, DEFAULT_KS
        ),
        "public_loop": lambda: public_loop_scores(model, tokenizer, loop_texts, DEFAULT_KS),
        "floor": lambda: floor_pass(model, loop_rows),
    }
    result: dict = {
        "model": model_facts(loaded),
        "texts": len(texts),
        "text_tokens": {
            "mean": float(np.mean([len(i) for i in text_ids])),
            "min": min(map(len, text_ids)),
            "max": max(map(len, text_ids)),
        },
        "methods": ONE_PASS_METHODS,
        "ks": list(DEFAULT_KS),
        "provenance": {name: d.provenance() for name, d in detectors.items()},
        "reps": reps,
    }
    full_tokens = sum(len(ids) - 1 for ids in text_ids)
    cut_tokens = sum(len(ids) - 1 for ids in loop_ids)
    rows = detectors["mia_fast"].target.rows(texts, None)
    result["scored_tokens"] = {
        "mia_fast": full_tokens,
        "mia_fast_model_forward": full_tokens,
        "public_loop": cut_tokens,
        "floor": cut_tokens,
    }
    result["ids_run"] = {
        "mia_fast": sum(len(r.ids) for r in rows),
        "mia_fast_model_forward": sum(len(r.ids) for r in rows),
        "public_loop": sum(map(len, loop_ids)),
        "floor": sum(map(len, loop_ids)),
    }
    if cut:
        result["note"] = (
            f"texts longer than the model's {context}-token context: mia-fast scores every token of them in its "
            f"sliding windows (stride {context // 2}, {result['ids_run']['mia_fast']} ids run for "
            f"{full_tokens} scored tokens); the public loop and the floor run each text cut to its first {context} "
            f"tokens ({cut_tokens} scored tokens). tokens/s count each contender's own scored tokens."
        )
    LIVE["result"] = result
    result["contenders"] = {}
    times, outputs = run_contenders(contenders, device, reps, deadline, label, results=result["contenders"])
    for name, entry in times.items():
        if "seconds" in entry:
            entry["tokens_per_second"] = result["scored_tokens"][name] / entry["seconds"]
        if "peak_extra_bytes" in entry:
            entry["peak_extra_GiB"] = entry["peak_extra_bytes"] / 2**30
    if "mia_fast" in outputs:
        # Scores.n_tokens: the positions mia-fast really scored (a check of the count above).
        result["mia_fast_n_tokens"] = int(np.sum(outputs["mia_fast"].n_tokens))
    ours, fallback = outputs.get("mia_fast"), outputs.get("mia_fast_model_forward")
    if ours is not None and fallback is not None:
        result["max_rel_diff_mia_fast_vs_model_forward"] = rel_diff(ours, fallback)
        result["max_rel_diff_by_column"] = {c: rel_diff({c: ours[c]}, {c: fallback[c]}) for c in fallback}
    if ours is not None and "public_loop" in outputs and not cut:
        result["max_rel_diff_mia_fast_vs_public_loop"] = rel_diff(ours, outputs["public_loop"])
    tps = {name: e["tokens_per_second"] for name, e in times.items() if "tokens_per_second" in e}
    if "mia_fast" in tps:
        result["speed"] = {
            f"mia_fast_vs_{other}": tps["mia_fast"] / tps[other]
            for other in ("floor", "public_loop", "mia_fast_model_forward")
            if other in tps
        }
    peaks = {name: e.get("peak_extra_bytes") for name, e in times.items()}
    if peaks.get("mia_fast") is not None and peaks.get("mia_fast_model_forward"):
        result["peak_extra_mia_fast_over_model_forward"] = peaks["mia_fast"] / peaks["mia_fast_model_forward"]
    log(
        f"{label}: "
        + ", ".join(f"{n} {t:,.0f} tokens/s" for n, t in tps.items())
        + f"; speed {result.get('speed')}; scores rel diff {result.get('max_rel_diff_mia_fast_vs_model_forward')}"
    )
    return result


def recall_section(
    detectors: dict[str, Detector],
    texts: list[str],
    prefix: str,
    reps: int,
    deadline: float,
    label: str,
    *,
    warm: bool = False,
) -> dict:
    """ReCaLL's prefixed pass (the texts after one shared prefix) against the plain pass, on the engine itself; the
    prefixed pass's statistics checked against the model's own forward (padded rows). ``warm``: the engine has just
    run these texts (the end-to-end section), so the first round is timed too."""
    engine = detectors["mia_fast"].target
    fallback = detectors["mia_fast_model_forward"].target
    device = engine.device
    prefixes = [prefix] * len(texts)
    result: dict = {
        "texts": len(texts),
        "prefix_tokens": len(engine.context_ids(prefix)),
        "forward": engine.provenance().get("forward"),
        "reps": reps,
    }
    contenders = {
        "plain": lambda: engine.compute(texts),
        "prefixed": lambda: engine.compute(texts, prefixes=prefixes),
    }
    LIVE["result"] = result
    result["contenders"] = {}
    times, outputs = run_contenders(contenders, device, reps, deadline, label, warm=warm, results=result["contenders"])
    try:
        free_memory()
        synchronize(device)
        began = time.perf_counter()
        outputs["prefixed_model_forward"] = fallback.compute(texts, prefixes=prefixes)
        synchronize(device)
        seconds = time.perf_counter() - began
        times["prefixed_model_forward"] = {"seconds": seconds, "runs_s": [seconds], "note": "one run"}
        result["forward_model"] = fallback.provenance().get("forward")
    except Exception as exc:
        times["prefixed_model_forward"] = {"error": describe_error(exc)}
        del exc
        free_memory()
    for name, stats in outputs.items():
        times[name]["scored_tokens"] = int(stats.offsets[-1])
        if "seconds" in times[name]:
            times[name]["tokens_per_second"] = times[name]["scored_tokens"] / times[name]["seconds"]
    if "seconds" in times["plain"] and "seconds" in times["prefixed"]:
        result["prefixed_over_plain_time"] = times["prefixed"]["seconds"] / times["plain"]["seconds"]
    ours, theirs = outputs.get("prefixed"), outputs.get("prefixed_model_forward")
    if ours is not None and theirs is not None:
        result["max_abs_diff_token_logp_vs_model_forward"] = float(np.abs(ours.logp - theirs.logp).max())
        result["max_rel_diff_mean_logp_vs_model_forward"] = rel_diff(
            {"mean_logp": ours.mean_logp}, {"mean_logp": theirs.mean_logp}
        )
    if ours is not None and outputs.get("plain") is not None:
        # ReCaLL's statistic per text: the prefixed mean log-likelihood over the plain one.
        ratio = ours.mean_logp / outputs["plain"].mean_logp
        result["recall_ratio_range"] = [float(np.min(ratio)), float(np.max(ratio))]
    log(
        f"{label}: prefixed / plain time {result.get('prefixed_over_plain_time')}; "
        f"vs model forward {result.get('max_rel_diff_mean_logp_vs_model_forward')}"
    )
    return result


# ------------------------------------------------------------------------------------------------------------ goals


GOALS = (
    # name, what it measures, wanted, at_least
    ("e2e_llama_8b_speed_vs_floor", "Llama-3-8B: mia-fast / per-text floor (tokens/s)", 1.0, True),
    ("e2e_llama_8b_speed_vs_public_loop", "Llama-3-8B: mia-fast / public loop (tokens/s)", 1.15, True),
    ("e2e_llama_1b_speed_vs_own_fallback", "Llama-3.2-1B: mia-fast / its own model-forward path", 1.3, True),
    ("e2e_recall_prefixed_over_plain_time", "ReCaLL: prefixed pass / plain pass (time)", 1.3, False),
    ("token_stats_fraction_of_copy_bandwidth", "token_stats: fraction of copy rate, V >= 32k, N >= 4096", 0.85, True),
    ("token_stats_speedup_vs_compile", "token_stats: speed / torch.compile, every shape", 1.5, True),
    ("fused_speed_vs_matmul_then_kernel", "fused head: speed / matmul then kernel, every shape", 1.0, True),
    ("fused_peak_extra_GiB_N32768_V151936", "fused head: peak extra GiB at N = 32768, V = 151936", 2.0, False),
    ("whole_run_seconds", "whole run: wall seconds", WALL_LIMIT_S, False),
)
AIMS = {"e2e_llama_8b_speed_vs_floor": 1.25}


def goal_measurements(result: dict) -> dict[str, tuple[float, str] | None]:
    """Each goal's measured value (the worst shape it covers) and where it was measured; None when not measured."""
    found: dict[str, tuple[float, str] | None] = {name: None for name, *_ in GOALS}
    large = result.get("e2e_llama_8b", {}).get("speed", {})
    if "mia_fast_vs_floor" in large:
        found["e2e_llama_8b_speed_vs_floor"] = (large["mia_fast_vs_floor"], "")
    if "mia_fast_vs_public_loop" in large:
        found["e2e_llama_8b_speed_vs_public_loop"] = (large["mia_fast_vs_public_loop"], "")
    small = result.get("e2e_llama_1b", {}).get("speed", {})
    if "mia_fast_vs_mia_fast_model_forward" in small:
        found["e2e_llama_1b_speed_vs_own_fallback"] = (small["mia_fast_vs_mia_fast_model_forward"], "")
    recall = result.get("e2e_recall", {})
    if "prefixed_over_plain_time" in recall:
        found["e2e_recall_prefixed_over_plain_time"] = (recall["prefixed_over_plain_time"], "")

    rows = result.get("token_stats", {}).get("rows", [])
    measured = [r for r in rows if "ms" in r.get("contenders", {}).get("kernel", {})]
    big = [r for r in measured if r["vocab"] >= 32000 and r["n"] >= 4096]
    if big:
        worst = min(big, key=lambda r: r["contenders"]["kernel"]["fraction_of_copy_bandwidth"])
        found["token_stats_fraction_of_copy_bandwidth"] = (
            worst["contenders"]["kernel"]["fraction_of_copy_bandwidth"],
            f"N={worst['n']} V={worst['vocab']}",
        )
    versus = [r for r in measured if "compile" in r.get("kernel_speedup", {})]
    if versus:
        worst = min(versus, key=lambda r: r["kernel_speedup"]["compile"])
        found["token_stats_speedup_vs_compile"] = (
            worst["kernel_speedup"]["compile"],
            f"N={worst['n']} V={worst['vocab']}",
        )

    speeds, peaks = [], []
    for row in result.get("fused", {}).get("rows", []):
        contenders = row.get("contenders", {})
        fused = {k: v for k, v in contenders.items() if k.startswith("fused") and "ms" in v}
        baseline = contenders.get("matmul_then_kernel", {})
        if not fused:
            continue
        shape = f"N={row['n']} H={row['hidden']} V={row['vocab']}"
        best = min(fused.values(), key=lambda v: v["ms"])
        if "ms" in baseline:
            speeds.append((baseline["ms"] / best["ms"], shape))
        if (row["n"], row["vocab"]) == (32768, 151936):
            engine = fused.get("fused_engine_default", best)
            if engine.get("peak_extra_bytes") is not None:
                peaks.append((engine["peak_extra_bytes"] / 2**30, f"{shape}, the engine's chunking"))
    if speeds:
        found["fused_speed_vs_matmul_then_kernel"] = min(speeds)
    if peaks:
        found["fused_peak_extra_GiB_N32768_V151936"] = max(peaks)
    if "wall_seconds" in result:
        found["whole_run_seconds"] = (result["wall_seconds"], "")
    return found


def goals(result: dict) -> dict:
    measured = goal_measurements(result)
    checks = {}
    for name, what, wanted, at_least in GOALS:
        value = measured[name]
        entry = {"what": what, "goal": wanted, "at_least": at_least, "measured": None, "met": None}
        if name in AIMS:
            entry["aim"] = AIMS[name]
        if value is not None:
            entry.update(measured=value[0], where=value[1], met=value[0] >= wanted if at_least else value[0] <= wanted)
        checks[name] = entry
    return checks


def goal_rows(checks: dict) -> list[list[str]]:
    rows = []
    for entry in checks.values():
        relation = ">=" if entry["at_least"] else "<="
        wanted = f"{relation} {entry['goal']:g}" + (f" (aim {entry['aim']:g})" if "aim" in entry else "")
        if entry["measured"] is None:
            measured, met = "not measured", "-"
        else:
            measured = f"{entry['measured']:.3g}" + (f" ({entry['where']})" if entry.get("where") else "")
            met = "yes" if entry["met"] else "NO"
        rows.append([entry["what"], measured, wanted, met])
    return rows


def print_goals(checks: dict, *, smoke: bool) -> None:
    rows = [["goal", "measured", "wanted", "met?"], *goal_rows(checks)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    title = "goals" + (" (smoke run on the CPU interpreter: the numbers mean nothing)" if smoke else "")
    print(title)
    for i, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        if i == 0:
            print("  ".join("-" * width for width in widths))


# ------------------------------------------------------------------------------------------------------------- plot


def _token_stats_panel(ax, result: dict) -> None:
    stats = result.get("token_stats", {})
    rows = [r for r in stats.get("rows", []) if r.get("contenders")]
    for name, marker in (("kernel", "o"), ("compile", "s"), ("eager", "^"), ("torch_reference", "x")):
        for n, style in zip(sorted({r["n"] for r in rows}), ("-", "--", ":")):
            points = [
                (r["vocab"], r["contenders"][name]["GBps"])
                for r in rows
                if r["n"] == n and "GBps" in r["contenders"].get(name, {})
            ]
            if points:
                ax.plot(*zip(*points), marker=marker, linestyle=style, label=f"{name} N={n}")
    if "copy_bandwidth_bps" in stats:
        ax.axhline(stats["copy_bandwidth_bps"] / 1e9, color="k", lw=0.8, label="measured copy rate")
        ax.axhline(0.85 * stats["copy_bandwidth_bps"] / 1e9, color="k", lw=0.8, ls=":", label="goal: 85% of it")
    ax.set(xlabel="vocabulary size V", ylabel="GB/s of bf16 logits read", title=f"token_stats{_trouble(stats)}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def _fused_panel(ax, result: dict) -> None:
    section = result.get("fused", {})
    fused = [r for r in section.get("rows", []) if r.get("contenders")]
    if not fused:
        ax.set_title(f"head + stats{_trouble(section) or ': not measured'}", fontsize=9)
        return
    largest = max(fused, key=lambda r: (r["n"], r["vocab"], r["hidden"]))
    names = list(largest["contenders"])
    ms = [largest["contenders"][k].get("ms", np.nan) for k in names]
    ax.barh(names, ms, color=["tab:gray", "tab:red"] + ["tab:blue"] * (len(names) - 2))
    ax.set(xlabel="ms", title=f"head + stats, N={largest['n']} H={largest['hidden']} V={largest['vocab']}")
    for y, k in enumerate(names):
        entry = largest["contenders"][k]
        text = entry.get("error") or f"{entry['ms']:.2f} ms"
        if entry.get("peak_extra_bytes") is not None:
            text += f", {entry['peak_extra_bytes'] / 2**30:.2f} GiB extra"
        ax.annotate(text, (0, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)


def _aggregation_panel(ax, result: dict) -> None:
    aggregation = result.get("aggregation", {})
    if "contenders" not in aggregation:
        ax.set_title(f"aggregations{_trouble(aggregation) or ': not measured'}", fontsize=9)
        return
    names = list(aggregation["contenders"])
    ax.barh(names, [aggregation["contenders"][k]["ms"] for k in names], color="tab:purple")
    ax.set_xscale("log")
    ax.set(xlabel="ms (log)", title=f"aggregations over {aggregation['tokens']:,} tokens")


def _peaks_panel(ax, result: dict) -> None:
    groups = [
        (section, result[section]["contenders"])
        for section in E2E_SECTIONS
        if isinstance(result.get(section), dict) and "contenders" in result[section]
    ]
    peaks = [
        [entries.get(name, {}).get("peak_extra_bytes") for _, entries in groups]
        for name in ("mia_fast", "mia_fast_model_forward")
    ]
    if not (groups and any(v is not None for row in peaks for v in row)):
        ax.axis("off")
        ax.set_title("end to end: peak GPU memory (CUDA only)")
        return
    x = np.arange(len(groups))
    labels = ("mia-fast (defaults)", "mia-fast on the model's forward")
    for offset, label, values, colour in zip((-0.2, 0.2), labels, peaks, ("tab:green", "tab:olive")):
        gib = [np.nan if v is None else v / 2**30 for v in values]
        ax.bar(x + offset, gib, width=0.4, label=label, color=colour)
        for xi, value in zip(x + offset, gib):
            if not np.isnan(value):
                ax.annotate(f"{value:.2f}", (xi, value), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [section for section, _ in groups], fontsize=7)
    ax.legend(fontsize=7)
    ax.set(ylabel="GiB", title="end to end: peak GPU memory above the model's weights")


def _goals_panel(ax, result: dict) -> None:
    ax.axis("off")
    checks = result.get("goals", {})
    ax.set_title("goals" + (" (smoke run: the numbers mean nothing)" if result.get("smoke") else ""))
    if not checks:
        return
    cells = goal_rows(checks)
    table = ax.table(
        cellText=cells,
        colLabels=["goal", "measured", "wanted", "met?"],
        loc="center",
        cellLoc="left",
        colWidths=[0.4, 0.3, 0.15, 0.06],
    )
    table.auto_set_font_size(value=False)
    table.set_fontsize(9)
    table.scale(1, 1.5)
    for i, row in enumerate(cells, start=1):
        table[i, 3].set_facecolor({"yes": "#c8f0c8", "NO": "#f6c6c6"}.get(row[3], "#eeeeee"))


E2E_COLOURS = {
    "mia_fast": "tab:green",
    "mia_fast_model_forward": "tab:olive",
    "public_loop": "tab:red",
    "floor": "tab:gray",
}


def _e2e_panel(ax, result: dict, section: str) -> None:
    e2e = result.get(section, {})
    entries = e2e.get("contenders", {})
    if not entries:
        ax.set_title(f"{section}{_trouble(e2e) or ': not measured'}", fontsize=9)
        return
    names = list(entries)
    values = [entries[k].get("tokens_per_second", 0) for k in names]
    ax.bar(names, values, color=[E2E_COLOURS.get(k, "tab:blue") for k in names])
    for x, k in enumerate(names):
        entry = entries[k]
        text = entry.get("error", "")[:30] or (f"{values[x]:,.0f}" if values[x] else "not timed")
        if entry.get("peak_extra_GiB") is not None:
            text += f"\n{entry['peak_extra_GiB']:.2f} GiB"
        ax.annotate(text, (x, values[x]), ha="center", va="bottom", fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    speed = ", ".join(f"{k.removeprefix('mia_fast_vs_')} {v:.2f}x" for k, v in e2e.get("speed", {}).items())
    model = e2e.get("model", {})
    title = f"{section} ({model.get('model_type')}, {e2e.get('texts')} texts){_trouble(e2e)}\nmia-fast vs: {speed}"
    ax.set(ylabel="scored tokens / s", title=title)
    ax.title.set_fontsize(8)


def _recall_panel(ax, result: dict) -> None:
    recall = result.get("e2e_recall", {})
    entries = recall.get("contenders", {})
    if not entries:
        ax.set_title(f"e2e_recall{_trouble(recall) or ': not measured'}", fontsize=9)
        return
    names = list(entries)
    values = [entries[k].get("seconds", 0) for k in names]
    ax.bar(names, values, color=["tab:green", "tab:blue", "tab:olive"][: len(names)])
    for x, k in enumerate(names):
        text = entries[k].get("error", "")[:30] or (f"{values[x]:.2f} s" if values[x] else "not timed")
        ax.annotate(text, (x, values[x]), ha="center", va="bottom", fontsize=7)
    ratio = recall.get("prefixed_over_plain_time")
    title = f"e2e_recall: {recall.get('prefix_tokens')}-token prefix, prefixed / plain " + (
        f"{ratio:.2f}x" if ratio else "n/a"
    )
    ax.set(ylabel="seconds", title=title + _trouble(recall))
    ax.title.set_fontsize(8)
    ax.tick_params(axis="x", labelsize=7)


def _trouble(section: dict) -> str:
    """': <error or why skipped>' for a section that did not finish, else ''."""
    why = section.get("error") or section.get("skipped") if isinstance(section, dict) else None
    return f": {why[:70]}" if why else ""


def plot(result: dict, path: Path) -> None:
    """One figure: the kernels' panels, end-to-end tokens/s per contender per section, the peak memory and the goals;
    a panel that fails to draw says so in its title, the others are drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(24, 15))
    grid = fig.add_gridspec(3, 4, height_ratios=[1, 1, 0.62])
    panels = [
        (grid[0, 0], "token_stats", _token_stats_panel),
        (grid[0, 1], "fused", _fused_panel),
        (grid[0, 2], "aggregation", _aggregation_panel),
        (grid[0, 3], "peak memory", _peaks_panel),
        *((grid[1, i], section, partial(_e2e_panel, section=section)) for i, section in enumerate(E2E_SECTIONS)),
        (grid[1, 3], "e2e_recall", _recall_panel),
        (grid[2, :], "goals", _goals_panel),
    ]
    for place, name, draw in panels:
        ax = fig.add_subplot(place)
        try:
            draw(ax, result)
        except Exception as exc:
            ax.clear()
            ax.set_title(f"{name}: the panel failed: {describe_error(exc)[:80]}", fontsize=8)
    where = result["machine"].get("gpu", result["machine"]["cpu"])
    fig.suptitle(
        f"mia-fast on {where}, torch {result.get('torch')}, triton {result.get('triton')}, transformers "
        f"{result.get('transformers')}, {result.get('wall_seconds', elapsed()):.0f} s"
        + (" (interpreter smoke run: times mean nothing)" if result["smoke"] else "")
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------------------- plan

# Bytes the eager recipe reads and writes per logit, the most of any token_stats contender (so the bound for each):
# the fp32 copy (2 read, 4 written), softmax and log_softmax (8 each), the two products (12 each) and their sums (4
# each), the square (8) and the max (4).
EAGER_BYTES_PER_LOGIT = 66
# Bytes per logit held at once by the eager recipe: the bf16 logits, the fp32 copy, probs, log_probs, the square and
# a product.
EAGER_PEAK_BYTES_PER_LOGIT = 22
PLAN_HOW = {
    "e2e_llama_8b": "its share: the model made, then timed rounds while one more ends inside it",
    "e2e_recall": "its share: timed rounds while one more ends inside it",
    "e2e_llama_1b": "its share: the model made, then timed rounds while one more ends inside it",
    "e2e_pythia_6.9b": "its share: the model made, then timed rounds while one more ends inside it",
    "fused": "its share: a shape that starts past it is timed once",
    "aggregation": "its share: fixed work",
}


def token_stats_plan(config: dict, copy_bps: float, memory_bytes: float, *, use_compile: bool) -> dict:
    """token_stats's seconds by the rule :func:`bench_token_stats` follows: each vocabulary's shapes at the copy rate
    (every contender's calls bounded by the eager recipe's bytes), and its torch.compile when ``compile_s`` still fits
    in the share."""
    contenders = 4 if use_compile else 3
    calls = 2 + config["stats_reps"]  # the peak-memory call, the warm-up, the timed runs
    share, compile_s = config["shares"]["token_stats"], config["compile_s"]
    seconds, compiles, notes = 0.0, 0, []
    for vocab in config["stats_vocab"]:
        if use_compile:
            if share - seconds >= compile_s:
                seconds += compile_s
                compiles += 1
            else:
                notes.append(f"V={vocab}: torch.compile left out, {max(share - seconds, 0):.0f} s of the share left")
        for n in config["stats_rows"]:
            seconds += n * vocab * EAGER_BYTES_PER_LOGIT * contenders * calls / copy_bps
            peak = n * vocab * EAGER_PEAK_BYTES_PER_LOGIT
            if peak > memory_bytes:
                notes.append(
                    f"N={n} V={vocab}: the eager recipe needs ~{peak / 2**30:.0f} GiB: recorded as out of memory"
                )
    how = f"{compiles} torch.compile of {compile_s:.0f} s (one per V, N dynamic), the shapes at the copy rate"
    return {"seconds": seconds, "how": how if use_compile else "the shapes at the copy rate", "notes": notes}


def plan(
    config: dict, sections: list[str], copy_bps: float, memory_bytes: float, budget: float, *, use_compile: bool
) -> dict:
    """The run's estimate before it starts, from the tables it runs by (``config``: its shapes, shares and planned
    costs) and the device's copy rate and memory: each section's shapes and seconds, the total against ``budget``."""
    large, small, neox = config["large"], config["small"], config["neox"]
    texts = f"{large['texts']} texts of {large['tokens'][0]}-{large['tokens'][1]} tokens"
    shapes = {
        "e2e_llama_8b": f"{large['label']}, {texts}",
        "e2e_recall": f"{large['label']}, the same texts after a {config['prefix_tokens']}-token prefix",
        "e2e_llama_1b": f"{small['label']}, {small['texts']} texts of {small['words']} words",
        "e2e_pythia_6.9b": f"{neox['label']}, e2e_llama_8b's texts",
        "token_stats": f"N in {config['stats_rows']}, V in {config['stats_vocab']}",
        "fused": f"H in {config['fused_hidden']}, V in {config['fused_vocab']}, N in {config['fused_rows']}",
        "aggregation": f"{config['aggregation_tokens']:,} tokens",
    }
    planned = {}
    for name in sections:
        if name == "token_stats":
            entry = token_stats_plan(config, copy_bps, memory_bytes, use_compile=use_compile)
        else:
            entry = {"seconds": float(config["shares"][name]), "how": PLAN_HOW[name], "notes": []}
        planned[name] = {"shapes": shapes[name], **entry}
    total = config["setup_s"] + sum(e["seconds"] for e in planned.values()) + config["finish_s"]
    return {
        "copy_bps": copy_bps,
        "memory_bytes": memory_bytes,
        "setup_seconds": config["setup_s"],
        "sections": planned,
        "finish_seconds": config["finish_s"],
        "total_seconds": total,
        "budget_seconds": budget,
        "limit_seconds": WALL_LIMIT_S,
        "fits": total <= budget,
    }


def print_plan(planned: dict, device: str) -> None:
    print(
        f"plan for {device}: copy rate {planned['copy_bps'] / 1e12:.3g} TB/s, {planned['memory_bytes'] / 2**30:.0f} GiB"
    )
    rows = [
        ["section", "seconds", "shapes", "how the seconds are reckoned"],
        ["setup", f"{planned['setup_seconds']:.0f}", "imports, texts, tokenizer, copy rate", ""],
        *([name, f"{e['seconds']:.0f}", e["shapes"], e["how"]] for name, e in planned["sections"].items()),
        ["finish", f"{planned['finish_seconds']:.0f}", "goals, plot, files", ""],
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].rjust(widths[1]), row[2].ljust(widths[2]), row[3]]
        print(("  " + "  ".join(cells)).rstrip())
    for name, entry in planned["sections"].items():
        for note in entry["notes"]:
            print(f"  {name}: {note}")
    verdict = "fits" if planned["fits"] else "DOES NOT FIT"
    print(
        f"  total {planned['total_seconds']:.0f} s: {verdict} the budget of {planned['budget_seconds']:.0f} s "
        f"(limit {planned['limit_seconds']} s)",
        flush=True,
    )


# ------------------------------------------------------------------------------------------------------------- main


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"


def device_slug(device: torch.device) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")


def device_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Run:
    """The result being built, written after every section; each section's time share and errors."""

    def __init__(self, result: dict, stem: Path, budget: float, config: dict, sections: list[str]):
        self.result, self.stem, self.budget, self.sections = result, stem, budget, sections
        self.shares, self.finish_s = config["shares"], config["finish_s"]
        self.result["section_seconds"] = {}

    def left(self) -> float:
        return self.budget - elapsed()

    def write_json(self) -> None:
        self.result["wall_seconds"] = elapsed()
        path = self.stem.with_suffix(".json")
        partial_path = path.with_suffix(".json.partial")
        partial_path.write_text(json.dumps(self.result, indent=2, default=str) + "\n")
        partial_path.replace(path)

    def deadline(self, name: str, began: float) -> float:
        """When the section's repetitions stop: its share from ``began``, scaled down when the run is behind its
        plan."""
        planned_after = self.finish_s + sum(self.shares[s] for s in self.sections[self.sections.index(name) + 1 :])
        behind = time.perf_counter() + max(self.left() - planned_after, 0.25 * self.shares[name])
        return min(began + self.shares[name], behind)

    def section(self, name: str, work: Callable[[float], dict], began: float | None = None) -> None:
        """Runs one section (``work(deadline)``), recording its result or its error, then writes the JSON. ``began``:
        when the section's share started (its model's making, before this call), else now."""
        if name not in self.sections:
            return
        began = time.perf_counter() if began is None else began
        if self.left() < 0.25 * self.shares[name]:
            self.result[name] = {"skipped": f"{self.left():.0f} s of the {self.budget:.0f} s budget left"}
            log(f"{name}: skipped, {self.left():.0f} s left")
        else:
            log(f"{name}: starting ({self.left():.0f} s of the budget left, share {self.shares[name]} s)")
            LIVE.clear()
            try:
                self.result[name] = work(self.deadline(name, began))
            except Terminated as exc:
                self.result[name] = {**LIVE.get("result", {}), "error": f"{exc} (in this section: what it had)"}
                raise
            except Exception as exc:
                self.result[name] = {
                    **LIVE.get("result", {}),
                    "error": describe_error(exc),
                    "traceback": traceback.format_exc()[-3000:],
                }
                log(f"{name}: FAILED: {describe_error(exc)}")
                traceback.print_exc(file=sys.stderr)
                del exc
        free_memory()
        seconds = time.perf_counter() - began
        self.result["section_seconds"][name] = seconds
        log(f"{name}: done in {seconds:.1f} s")
        self.write_json()


def run_model_group(run: Run, config: dict, key: str, texts: list[str], tokenizer, device: torch.device) -> None:
    """Builds one model, runs its sections (the 8B model: its end-to-end section, then ReCaLL's), frees it."""
    spec = config[key]
    names = {"small": ["e2e_llama_1b"], "large": ["e2e_llama_8b", "e2e_recall"], "neox": ["e2e_pythia_6.9b"]}[key]
    names = [n for n in names if n in run.sections]
    if not names:
        return
    if run.left() < 0.25 * run.shares[names[0]]:
        for name in names:
            run.result[name] = {"skipped": f"{run.left():.0f} s of the {run.budget:.0f} s budget left"}
        log(f"{', '.join(names)}: skipped, {run.left():.0f} s left")
        run.write_json()
        return
    began = time.perf_counter()
    try:
        loaded = build_model(spec["family"], spec["shape"], tokenizer, device, spec["label"])
        detectors = detectors_for(loaded, texts)
    except Exception as exc:
        error = {"error": f"building the {spec['label']} model: {describe_error(exc)}"}
        log(error["error"])
        traceback.print_exc(file=sys.stderr)
        del exc
        for name in names:
            run.result[name] = error
        free_memory()
        run.write_json()
        return
    build_s = time.perf_counter() - began
    log(f"{spec['label']} shape made in {build_s:.1f} s")

    def e2e(deadline: float, name: str) -> dict:
        out = e2e_section(loaded, detectors, texts, config["e2e_reps"], deadline, name)
        out["model_build_seconds"] = build_s
        out["shape"] = {**spec["shape"], "label": spec["label"]}
        return out

    def recall(deadline: float) -> dict:
        return recall_section(
            detectors, texts, config["prefix"], config["recall_reps"], deadline, "e2e_recall", warm=len(names) > 1
        )

    for name in names:
        # The first section's share holds the model's making.
        run.section(
            name, recall if name == "e2e_recall" else partial(e2e, name=name), began if name == names[0] else None
        )
    # The model, its detectors and these closures go when this returns; the caller frees the memory.


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile contender")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole run (default 450; smoke 600)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print the run's plan (each section's shapes and estimated seconds, the total) and exit; without a GPU "
        "give --copy-tbps and --memory-gib",
    )
    parser.add_argument("--copy-tbps", type=float, help="plan for this copy rate (TB/s, read + written), not measured")
    parser.add_argument("--memory-gib", type=float, help="plan for this device memory (GiB), not measured")
    args = parser.parse_args()
    sections = [s for s in args.only.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    sections = [s for s in SECTIONS if s in sections]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    hypothetical = args.copy_tbps is not None and args.memory_gib is not None
    if device.type != "cuda" and not args.smoke and not (args.plan and hypothetical):
        parser.error(
            "no CUDA device: the kernels run on the CPU only in the interpreter, so only --smoke is meaningful here "
            "(or --plan with --copy-tbps and --memory-gib)"
        )
    config = dict(SMOKE if args.smoke else FULL)
    budget = args.budget or config["budget"]
    if args.copy_tbps is not None:
        copy_bps = args.copy_tbps * 1e12
    else:
        copy_bps = copy_bandwidth(device, 2**32 if device.type == "cuda" else 2**20, config["stats_reps"])
        free_memory()
    memory_bytes = args.memory_gib * 2**30 if args.memory_gib is not None else device_memory(device)
    planned = plan(config, sections, copy_bps, memory_bytes, budget, use_compile=not args.no_compile)
    print_plan(planned, "the device given" if hypothetical else device_name(device))
    if args.plan:
        return
    signal.signal(signal.SIGTERM, on_sigterm)

    import transformers
    import triton

    transformers.logging.set_verbosity_error()
    result: dict = {
        "benchmark": "kernels",
        "smoke": args.smoke,
        "machine": machine(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
        "mia_fast_from": str(Path(mia_fast.__file__).parent),
        "budget_seconds": budget,
        "sections": sections,
        "plan": planned,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"kernels-{device_slug(device)}"
    run = Run(result, stem, budget, config, sections)
    log(f"device {result['machine'].get('gpu', 'cpu')}; sections {', '.join(sections)}; budget {budget:.0f} s")
    try:
        e2e = [s for s in sections if s.startswith("e2e")]
        if e2e:
            began = time.perf_counter()
            try:
                docs = stdlib_corpus()
                tokenizer = train_tokenizer(docs, config["tokenizer_vocab"])
                small, large = config["small"], config["large"]
                texts = {
                    "small": word_texts(docs, small["texts"], small["words"]),
                    "large": token_texts(docs, tokenizer, token_lengths(large["texts"], *large["tokens"]), seed=2),
                }
                texts["neox"] = texts["large"]
                config["prefix"] = token_texts(docs, tokenizer, [config["prefix_tokens"]], seed=3)[0]
                result["texts"] = {
                    "source": f"docstrings of Python {sys.version.split()[0]}'s standard library "
                    "(mia_fast.evaluation.corpus.stdlib_corpus)",
                    "docstrings": len(docs),
                    "tokenizer_vocab": len(tokenizer),
                    "setup_seconds": time.perf_counter() - began,
                }
                log(f"texts and tokenizer ready ({len(docs)} docstrings, {len(tokenizer)} token ids)")
            except Exception as exc:
                result["texts"] = {"error": describe_error(exc), "traceback": traceback.format_exc()[-3000:]}
                for name in e2e:
                    result[name] = {"error": f"no texts: {describe_error(exc)}"}
                log(f"texts: FAILED: {describe_error(exc)}")
                e2e = []
            for key in ("large", "small", "neox"):
                if e2e:
                    run_model_group(run, config, key, texts[key], tokenizer, device)
                    free_memory()

        def micro(deadline: float, name: str) -> dict:
            if name == "token_stats":
                return bench_token_stats(config, device, copy_bps, deadline, use_compile=not args.no_compile)
            if name == "fused":
                return bench_fused(config, device, deadline)
            return bench_aggregation(config, device)

        for name in ("token_stats", "fused", "aggregation"):
            run.section(name, partial(micro, name=name))
    except Terminated as exc:
        result["terminated"] = str(exc)
        log(str(exc))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the files short
        result["goals_meaningful"] = not args.smoke
        result["wall_seconds"] = elapsed()
        result["goals"] = goals(result)
        run.write_json()
        try:
            plot(result, stem.with_suffix(".png"))
        except Exception as exc:
            result["plot_error"] = describe_error(exc)
            traceback.print_exc(file=sys.stderr)
        result["wall_seconds"] = elapsed()
        result["goals"] = goals(result)  # the whole run's time, the plot included
        run.write_json()
        print_goals(result["goals"], smoke=args.smoke)
        timing = {"texts and tokenizer": result.get("texts", {}).get("setup_seconds")}
        for name in sections:
            built = result.get(name, {}).get("model_build_seconds") if isinstance(result.get(name), dict) else None
            if built is not None:
                timing[f"{name}: model made"] = built
            timing[name] = result["section_seconds"].get(name)
        print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timing.items() if v is not None))
        print(f"wrote {stem}.json and {stem}.png ({elapsed():.0f} s)")
    if "terminated" in result:
        sys.exit(124)


if __name__ == "__main__":
    main()
