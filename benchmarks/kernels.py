"""Kernel benchmarks: token_stats, the fused head path, the aggregations and end-to-end scoring.

    python benchmarks/kernels.py [--only token_stats,fused,aggregation,end_to_end] [--data DIR]
        on a CUDA machine: writes results/kernels-<device>.json and .png
    python benchmarks/kernels.py --smoke --out DIR
        tiny shapes on the CPU under TRITON_INTERPRET=1: checks that every section runs (no timing claims)

Every contender runs in the same process on the same inputs; times are medians over repetitions
(CUDA events on a GPU). Effective bandwidth counts the bytes of logits read once; it is compared with
the device-to-device copy bandwidth measured in the same run (bytes read + written per second).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
from common import RESULTS, SHARED_DATA, machine, pile_texts
from reference_loop import public_loop_scores

from mia_fast import DcpddSettings, Detector, LoadedModel, ModelConfig, kernels
from mia_fast.frequency.build import count_token_ids
from mia_fast.kernels import token_stats
from mia_fast.methods import DEFAULT_KS
from mia_fast.ops.bottom_k import bottom_k_counts, bottom_k_means
from mia_fast.ops.first_occurrence import capped_first_occurrence_mean
from mia_fast.ops.token_stats import linear_token_stats, token_stats_torch
from mia_fast.pipeline.stats import TOKEN_STATS_COLUMNS, TokenStats

SECTIONS = ("token_stats", "fused", "aggregation", "end_to_end")
ONE_PASS_METHODS = ["loss", "zlib", "mink", "minkpp", "dcpdd"]
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
FULL = dict(
    stats_rows=[2048, 8192, 32768],
    stats_vocab=[32000, 50304, 128256, 151936],
    fused_hidden=[2048, 4096],
    fused_vocab=[128256, 151936],
    fused_rows=[4096, 32768],
    fused_chunk_mb=[64, 256, 1024],
    aggregation_tokens=10_000_000,
    model=LLAMA_3_2_1B,
    e2e_texts=512,
    e2e_words=400,
    longest_start=4096,
    reps=10,
)
SMOKE = dict(
    stats_rows=[33],
    stats_vocab=[1000, 5003],
    fused_hidden=[32],
    fused_vocab=[1000],
    fused_rows=[77],
    fused_chunk_mb=[0.05],
    aggregation_tokens=5_000,
    model=TINY_LLAMA,
    e2e_texts=6,
    e2e_words=30,
    longest_start=64,
    reps=1,
)


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
    """Median time and peak extra memory of ``fn``, or ``{"error": "oom"}`` when it does not fit."""
    try:
        peak = peak_extra_bytes(fn, device)
        return {"ms": median_ms(fn, device, reps), "peak_extra_bytes": peak}
    except (torch.OutOfMemoryError, RuntimeError) as exc:
        if not out_of_memory(exc):
            raise
        torch.cuda.empty_cache()
        return {"error": "oom"}


def report(label: str, contenders: dict[str, dict]) -> None:
    print(
        f"{label}: "
        + ", ".join(f"{name} {r['ms']:.3f} ms" if "ms" in r else f"{name} OOM" for name, r in contenders.items()),
        file=sys.stderr,
    )


def copy_bandwidth(device: torch.device, nbytes: int, reps: int) -> float:
    """Device-to-device copy bandwidth, bytes read + written per second."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), device, max(reps, 3))
    return 2 * nbytes / (ms / 1e3)


def compiled_eager() -> Callable:
    torch._dynamo.reset()  # one fresh compilation per shape; no recompile limit hit
    return torch.compile(eager_token_stats, dynamic=False)


def token_stats_row(n: int, vocab: int, device: torch.device, copy_bps: float, use_compile: bool, reps: int) -> dict:
    """One shape of the token_stats benchmark; its tensors are freed when it returns."""
    logits = (torch.randn(n, vocab, device=device) * 3).to(torch.bfloat16)
    targets = torch.randint(0, vocab, (n,), device=device)
    contenders = {
        "kernel": partial(token_stats, logits, targets),
        "eager": partial(eager_token_stats, logits, targets),
        "torch_reference": partial(token_stats_torch, logits, targets),
    }
    if use_compile:
        contenders["compile"] = partial(compiled_eager(), logits, targets)
    row = {"n": n, "vocab": vocab, "logits_bytes": logits.numel() * logits.element_size()}
    # Accuracy on real hardware, on a slice small enough for an fp64 copy.
    head, head_targets = logits[:256], targets[:256]
    truth = fp64_token_stats(head, head_targets)
    row["max_abs_error_vs_fp64"] = {
        "kernel": max_abs_errors(token_stats(head, head_targets), truth),
        "eager": max_abs_errors(eager_token_stats(head, head_targets), truth),
    }
    row["contenders"] = times = {name: measure(fn, device, reps) for name, fn in contenders.items()}
    for result in times.values():
        if "ms" in result:
            result["GBps"] = row["logits_bytes"] / (result["ms"] / 1e3) / 1e9
            result["fraction_of_copy_bandwidth"] = result["GBps"] * 1e9 / copy_bps
    row["kernel_speedup"] = {name: times[name]["ms"] / times["kernel"]["ms"] for name in times if "ms" in times[name]}
    report(f"token_stats N={n} V={vocab}", times)
    return row


def bench_token_stats(config: dict, device: torch.device, copy_bps: float, use_compile: bool) -> list[dict]:
    return [
        token_stats_row(n, vocab, device, copy_bps, use_compile, config["reps"])
        for vocab in config["stats_vocab"]
        for n in config["stats_rows"]
    ]


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
            linear_token_stats, hidden, weight, targets, chunk_rows=chunk_rows, impl="triton"
        )
    row = {"n": n, "hidden": hidden_size, "vocab": vocab}
    row["max_abs_diff_fused_vs_matmul_then_kernel"] = max_abs_errors(
        contenders[f"fused_chunk_{chunk_mb[0]}MB"](), token_stats(hidden @ weight.T, targets)
    )
    row["contenders"] = {name: measure(fn, weight.device, reps) for name, fn in contenders.items()}
    report(f"fused N={n} H={hidden_size} V={vocab}", row["contenders"])
    return row


def bench_fused(config: dict, device: torch.device) -> list[dict]:
    rows = []
    for hidden_size in config["fused_hidden"]:
        for vocab in config["fused_vocab"]:
            weight = (torch.randn(vocab, hidden_size, device=device) * 0.02).to(torch.bfloat16)
            rows += [fused_row(n, weight, config["fused_chunk_mb"], config["reps"]) for n in config["fused_rows"]]
    return rows


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
    result = {"tokens": int(stats.offsets[-1]), "texts": len(stats), "vocab": vocab}
    result["max_abs_diff_kernel_vs_numpy"] = {
        "bottom_k": float(
            np.abs(contenders["bottom_k_10ks_kernel"]().cpu().numpy() - contenders["bottom_k_10ks_numpy"]()).max()
        ),
        "dcpdd": float(np.abs(contenders["dcpdd_kernel"]().cpu().numpy() - contenders["dcpdd_numpy"]()).max()),
    }
    result["contenders"] = {
        name: {"ms": median_ms(fn, torch.device("cpu") if "numpy" in name else device, config["reps"])}
        for name, fn in contenders.items()
    }
    report("aggregation", result["contenders"])
    return result


def corpus_texts(data: Path, n: int, words: int) -> list[str]:
    """Real documents from the shared pile_test files, cut to ``words`` words."""
    texts = []
    for subset in ("wikipedia_en", "pile_cc", "pubmed_abstracts", "stackexchange"):
        texts += pile_texts(subset, n=n, max_words=words, root=data)
    return texts[:n]


def random_model(model_config: dict, texts: list[str], device: torch.device) -> LoadedModel:
    """A random-initialised Llama of the given shape in bf16 (fp32 on CPU) with a BPE tokenizer trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(32000, model_config["vocab_size"]),
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="</s>")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    config = LlamaConfig(**model_config, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, name="random Llama", device=device, dtype=dtype)


def longest_scorable(
    score_one: Callable[[str, int], object], long_ids: list[int], tokenizer, start: int, limit: int
) -> dict:
    """Doubles the length of one text from ``start`` tokens until it no longer fits (or reaches ``limit``)."""
    longest, length = None, start
    while length <= min(limit, len(long_ids)):
        text = tokenizer.decode(long_ids[: length - 1])
        try:
            score_one(text, length)
            longest = length
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            if not out_of_memory(exc):
                raise
            torch.cuda.empty_cache()
            return {"longest_tokens": longest, "first_failure_tokens": length}
        length *= 2
    return {"longest_tokens": longest, "first_failure_tokens": None, "limit_tokens": min(limit, len(long_ids))}


def bench_end_to_end(config: dict, device: torch.device, data: Path) -> dict:
    texts = corpus_texts(data, config["e2e_texts"], config["e2e_words"])
    loaded = random_model(config["model"], texts, device)
    tokenizer = loaded.tokenizer
    scored_tokens = sum(len(ids) - 1 for ids in tokenizer(texts)["input_ids"])
    ids = np.concatenate([np.asarray(i, np.uint32) for i in tokenizer(texts)["input_ids"]])
    counts = count_token_ids(ids, loaded.vocab_size)
    detectors = {
        backend: Detector(
            ModelConfig(loaded, prepend_start=False, backend=backend), [DcpddSettings(frequencies=counts)]
        )
        for backend in ("triton", "torch")
    }
    contenders = {
        "kernels": lambda: detectors["triton"].score(texts, ONE_PASS_METHODS, DEFAULT_KS),
        "torch_reference": lambda: detectors["torch"].score(texts, ONE_PASS_METHODS, DEFAULT_KS),
        "public_loop": lambda: public_loop_scores(loaded.model, tokenizer, texts, DEFAULT_KS),
    }
    result = {
        "model": config["model"],
        "texts": len(texts),
        "scored_tokens": scored_tokens,
        "methods": ONE_PASS_METHODS,
    }
    kernel_scores, reference_scores = contenders["kernels"](), contenders["torch_reference"]()
    result["max_rel_diff_kernels_vs_reference"] = max(
        float(np.max(np.abs(kernel_scores[c] - reference_scores[c]) / np.maximum(np.abs(reference_scores[c]), 1e-12)))
        for c in reference_scores
    )
    result["contenders"] = times = {}
    for name, fn in contenders.items():
        ms = median_ms(fn, device, max(1, config["reps"] // 3))
        times[name] = {"ms": ms, "tokens_per_second": scored_tokens / (ms / 1e3)}
    result["kernels_speedup"] = {name: times[name]["ms"] / times["kernels"]["ms"] for name in times}
    report("end to end", times)

    long_ids = [i for text_ids in tokenizer(texts * 64)["input_ids"] for i in text_ids]
    limit = loaded.context_length
    longest = {}
    for backend, name in (("triton", "kernels"), ("torch", "torch_reference")):

        def score_one(text: str, length: int, backend=backend) -> None:
            Detector(ModelConfig(loaded, prepend_start=False, max_length=length, backend=backend)).score(
                [text], ["loss", "mink", "minkpp"], [0.2]
            )

        longest[name] = longest_scorable(score_one, long_ids, tokenizer, config["longest_start"], limit)
    longest["public_loop"] = longest_scorable(
        lambda text, _: public_loop_scores(loaded.model, tokenizer, [text], [0.2]),
        long_ids,
        tokenizer,
        config["longest_start"],
        limit,
    )
    result["longest_text"] = longest
    print(f"longest text: {longest}", file=sys.stderr)
    return result


def goals(result: dict) -> dict:
    """The issue's goals against the measured figures (the worst shape each goal covers)."""
    checks: dict[str, dict] = {}

    def check(name: str, measured: float, goal: float, at_least: bool = True) -> None:
        checks[name] = {
            "measured": measured,
            "goal": goal,
            "at_least": at_least,
            "met": measured >= goal if at_least else measured <= goal,
        }

    rows = [r for r in result.get("token_stats", []) if r["vocab"] >= 50000 and "ms" in r["contenders"]["kernel"]]
    if rows:
        check(
            "token_stats_fraction_of_copy_bandwidth",
            min(r["contenders"]["kernel"]["fraction_of_copy_bandwidth"] for r in rows),
            0.85,
        )
        for rival, target in (("eager", 5.0), ("compile", 1.5)):
            speedups = [r["kernel_speedup"][rival] for r in rows if rival in r["kernel_speedup"]]
            if speedups:
                check(f"token_stats_speedup_vs_{rival}", min(speedups), target)
    for row in result.get("fused", []):
        fused = [v for k, v in row["contenders"].items() if k.startswith("fused") and "ms" in v]
        baseline = row["contenders"]["matmul_then_kernel"]
        if not fused:
            continue
        best = min(fused, key=lambda v: v["ms"])
        shape = f"N{row['n']}_H{row['hidden']}_V{row['vocab']}"
        if "ms" in baseline:
            check(f"fused_{shape}_speed_vs_matmul_then_kernel", baseline["ms"] / best["ms"], 1.0)
        if (row["n"], row["vocab"]) == (32768, 151936) and best["peak_extra_bytes"] is not None:
            check(f"fused_{shape}_peak_extra_GiB", best["peak_extra_bytes"] / 2**30, 2.0, at_least=False)
    return checks


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    rows = result.get("token_stats", [])
    for name, marker in (("kernel", "o"), ("compile", "s"), ("eager", "^"), ("torch_reference", "x")):
        for n, style in zip(sorted({r["n"] for r in rows}), ("-", "--", ":")):
            points = [
                (r["vocab"], r["contenders"][name]["GBps"])
                for r in rows
                if r["n"] == n and "GBps" in r["contenders"].get(name, {})
            ]
            if points:
                axes[0].plot(*zip(*points), marker=marker, linestyle=style, label=f"{name} N={n}")
    if "copy_bandwidth_bps" in result:
        axes[0].axhline(result["copy_bandwidth_bps"] / 1e9, color="k", lw=0.8, label="measured copy bandwidth")
    axes[0].set(xlabel="vocabulary size V", ylabel="GB/s of bf16 logits read", title="token_stats")
    axes[0].legend(fontsize=6)

    fused = result.get("fused", [])
    if fused:
        largest = max(fused, key=lambda r: (r["n"], r["vocab"], r["hidden"]))
        names = list(largest["contenders"])
        ms = [largest["contenders"][k].get("ms", np.nan) for k in names]
        peak = [(largest["contenders"][k].get("peak_extra_bytes") or np.nan) / 2**30 for k in names]
        axes[1].barh(names, ms, color="tab:blue")
        axes[1].set(xlabel="ms", title=f"head + stats, N={largest['n']} H={largest['hidden']} V={largest['vocab']}")
        for y, gib in enumerate(peak):
            if not np.isnan(gib):
                axes[1].annotate(
                    f"{gib:.2f} GiB extra",
                    (0, y),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                    color="w",
                )

    e2e = result.get("end_to_end")
    if e2e:
        names = list(e2e["contenders"])
        axes[2].bar(
            names,
            [e2e["contenders"][k]["tokens_per_second"] for k in names],
            color=["tab:green", "tab:orange", "tab:red"],
        )
        axes[2].set(ylabel="scored tokens / s", title=f"all one-pass methods, {e2e['scored_tokens']} tokens")
    where = result["machine"].get("gpu", result["machine"]["cpu"])
    fig.suptitle(
        f"mia-fast kernels on {where}" + (" (interpreter smoke run: times mean nothing)" if result["smoke"] else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def device_slug(device: torch.device) -> str:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-interpreter"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile contender")
    parser.add_argument(
        "--data", type=Path, default=SHARED_DATA, help="folder holding pile_test/ (the end-to-end texts)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sections = [s for s in args.only.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        parser.error(
            "no CUDA device: the kernels run on the CPU only in the interpreter, so only --smoke is meaningful here"
        )
    config = SMOKE if args.smoke else FULL

    result: dict = {"benchmark": "kernels", "smoke": args.smoke, "machine": machine(), "torch": torch.__version__}
    import triton

    result["triton"] = triton.__version__
    result["copy_bandwidth_bps"] = copy_bandwidth(device, 2**32 if device.type == "cuda" else 2**20, config["reps"])
    if "token_stats" in sections:
        result["token_stats"] = bench_token_stats(config, device, result["copy_bandwidth_bps"], not args.no_compile)
    if "fused" in sections:
        result["fused"] = bench_fused(config, device)
    if "aggregation" in sections:
        result["aggregation"] = bench_aggregation(config, device)
    if "end_to_end" in sections:
        result["end_to_end"] = bench_end_to_end(config, device, args.data)

    result["goals"] = {} if args.smoke else goals(result)
    for name, check in result["goals"].items():
        relation = ">=" if check["at_least"] else "<="
        print(
            f"goal {name}: {check['measured']:.3g} ({relation} {check['goal']:g} wanted) "
            f"-> {'met' if check['met'] else 'NOT met'}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"kernels-{device_slug(device)}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, stem.with_suffix(".png"))
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
