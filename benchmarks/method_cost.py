"""What each method costs: wall time per 1000 tokens of input relative to loss alone, and the throughput
of each kind of pass, in one process on the built-in SmolLM2-135M (fp32).

Every method is scored on its own (a fresh ``Detector.score`` call with just that method), its rounds
interleaved with loss-only rounds so that machine noise hits both alike; medians over the rounds.
The texts are the first ``--texts`` wikipedia_en texts cut to ``--max-words`` words; the prefixes of
recall and conrecall are 4 other wikipedia_en texts each (as the demo draws them); the frequencies of
dcpdd are counted over 500 pile_cc documents; ref's reference model is a second copy of the built-in
model (a reference of the same size); neighbor makes 25 word-drop neighbours per text; probe reads
the middle layer with an untrained probe of the trained shape (its cost does not depend on its
weights); ref, ezmia and wbc share that reference; camia and fsd_* read 16 other wikipedia_en texts as known
non-members (camia's reference set, fsd's fine-tuning set; the fine-tune itself is timed once, apart, as it runs
once per non-member set and is then read from its cache). Each pass kind is also run alone through the pass
planner (``run_passes``): tokens run (prefix, transformed text, generated tokens) per second.

    python benchmarks/method_cost.py [--texts 16] [--max-words 100] [--rounds 3]

Writes ``results/method-cost-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast import (
    CamiaSettings,
    ConRecallSettings,
    DcpddSettings,
    Detector,
    FsdSettings,
    ModelConfig,
    NeighborSettings,
    PacSettings,
    ProbeSettings,
    RecallSettings,
    SamiaSettings,
)
from mia_fast.frequency.build import count_token_ids
from mia_fast.methods.camia import REPEATED
from mia_fast.methods.conrecall import member_prefix_pass
from mia_fast.methods.fsd import on_finetuned
from mia_fast.methods.gradnorm import gradnorm_pass
from mia_fast.methods.neighbor import neighbor_passes
from mia_fast.methods.ngram_coverage import ngram_pass
from mia_fast.methods.pac import pac_passes
from mia_fast.methods.probe import Probe
from mia_fast.methods.recall import recall_pass
from mia_fast.methods.reference_tokens import token_passes
from mia_fast.methods.samia import samia_pass
from mia_fast.methods.settings import recorded
from mia_fast.pipeline.finetune import fine_tune
from mia_fast.pipeline.models import LoadedModel, load_model
from mia_fast.pipeline.neighbors import WordDropNeighbors
from mia_fast.pipeline.passes import PLAIN
from mia_fast.scoring.planner import run_passes

METHODS = [
    "loss",
    "zlib",
    "mink",
    "minkpp",
    "dcpdd",
    "lowercase",
    "ref",
    "recall",
    "conrecall",
    "neighbor",
    "samia",
    "pac",
    "gradnorm",
    "probe",
    "gapk",
    "surp",
    "camia",
    "ezmia",
    "wbc",
    "fsd_loss",
    "fsd_minkpp",
    "ngram_coverage",
]
NONMEMBERS = 16


def untrained_probe(loaded) -> Probe:
    hidden, layers = loaded.model.config.hidden_size, loaded.model.config.num_hidden_layers
    rng = np.random.default_rng(0)
    return Probe(
        weight=rng.standard_normal(hidden).astype(np.float32),
        layer=layers // 2,
        normalization="train",
        train_mean=np.zeros(hidden, np.float32),
        train_std=np.ones(hidden, np.float32),
        card={"model": {"name": loaded.name, "weights_fingerprint": loaded.weights_fingerprint()}},
    )


def timed(run) -> tuple[float, int]:
    """Seconds of ``run(on_tokenized)`` and the tokens its passes reported."""
    tokens = [0]
    started = time.perf_counter()
    run(lambda n: tokens.__setitem__(0, tokens[0] + n))
    return time.perf_counter() - started, tokens[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=16)
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated (default: every method)")
    parser.add_argument("--tag", help="suffix of the result file, so a run of some methods keeps the full run's")
    args = parser.parse_args()
    methods = args.methods.split(",")

    wiki = pile_texts("wikipedia_en", n=args.texts + 8 + NONMEMBERS, max_words=args.max_words)
    texts, prefix_nonmembers, prefix_members, nonmembers = (
        wiki[: args.texts],
        wiki[args.texts : args.texts + 4],
        wiki[args.texts + 4 : args.texts + 8],
        wiki[args.texts + 8 :],
    )
    loaded = load_model(device="cpu", dtype="fp32")
    reference = load_model(device="cpu", dtype="fp32")
    counts = count_token_ids(
        np.concatenate(
            [
                np.asarray(i, np.int64)
                for i in loaded.tokenizer(pile_texts("pile_cc", n=500, max_words=None))["input_ids"]
            ]
        ),
        loaded.vocab_size,
    )
    detector = Detector(
        ModelConfig(loaded, ref_model=reference, prepend_start=False),
        [
            DcpddSettings(frequencies=counts),
            RecallSettings(prefix_nonmembers=prefix_nonmembers),
            ConRecallSettings(prefix_members=prefix_members),
            NeighborSettings(WordDropNeighbors()),
            ProbeSettings(untrained_probe(loaded)),
            CamiaSettings(nonmembers=nonmembers),
            FsdSettings(nonmembers=nonmembers),
        ],
    )
    # FSD fine-tunes a copy once per non-member set and settings (then reads it from its cache): timed apart.
    fsd_tuning = detector.settings.of(FsdSettings).tuning
    fine_tune_s = None
    if any(m.startswith("fsd_") for m in methods):
        fine_tune_s, _ = timed(
            lambda on_tokenized: fine_tune(
                LoadedModel(copy.deepcopy(loaded.model), loaded.tokenizer, loaded.name, loaded.device, loaded.dtype),
                nonmembers,
                fsd_tuning,
            )
        )
    input_tokens = int(detector.target.scored_positions(texts).sum() + len(texts))
    options = detector.settings
    # Each kind of pass, with the methods that read it (the plain pass: every run).
    every_kind = {
        "plain (TokenStats)": ([PLAIN], methods),
        "non-member prefix (recall)": ([recall_pass(options)], ["recall", "conrecall"]),
        "member prefix (conrecall)": ([member_prefix_pass(options)], ["conrecall"]),
        "one neighbour rank": (neighbor_passes(options)[:1], ["neighbor"]),
        "one word-swapped copy (pac)": (pac_passes(options)[:1], ["pac"]),
        "samia sampling (10 per text; prompt + generated tokens)": ([samia_pass(options)], ["samia"]),
        "gradient norm (forward + backward, one text at a time)": ([gradnorm_pass(options)], ["gradnorm"]),
        "probe hidden states (stops at its layer)": ([options.of(ProbeSettings).probe.scoring_pass], ["probe"]),
        "text repeated 6 times (camia)": ([REPEATED], ["camia"]),
        "token spans of both models (ezmia, wbc; no forward)": (list(token_passes(options)[2:]), ["ezmia", "wbc"]),
        "plain on the fine-tuned copy (fsd_*)": ([on_finetuned(PLAIN)], ["fsd_loss", "fsd_minkpp"]),
        "ngram_coverage sampling (20 per text)": ([ngram_pass(options)], ["ngram_coverage"]),
    }
    pass_kinds = {kind: passes for kind, (passes, readers) in every_kind.items() if set(readers) & set(methods)}
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    loss_beside: dict[str, list[float]] = {m: [] for m in methods}
    tokens_run: dict[str, int] = {}
    pass_seconds: dict[str, list[float]] = {k: [] for k in pass_kinds}
    pass_tokens: dict[str, int] = {}
    for round_ in range(args.rounds):
        for method in methods:
            loss_s, _ = timed(lambda on_tokenized: detector.score(texts, methods=["loss"], on_tokenized=on_tokenized))
            method_s, tokens_run[method] = timed(
                lambda on_tokenized, method=method: detector.score(texts, methods=[method], on_tokenized=on_tokenized)
            )
            seconds[method].append(method_s)
            loss_beside[method].append(loss_s)
            print(f"round {round_ + 1}: {method} {method_s:.1f} s (loss beside it {loss_s:.1f} s)", flush=True)
        for kind, passes in pass_kinds.items():
            pass_s, pass_tokens[kind] = timed(
                lambda on_tokenized, passes=passes: run_passes(
                    detector._engines_for(passes, options), texts, passes, on_tokenized
                )
            )
            pass_seconds[kind].append(pass_s)

    per_method = {}
    for method in methods:
        median, loss_median = statistics.median(seconds[method]), statistics.median(loss_beside[method])
        per_method[method] = {
            "seconds_median": median,
            "loss_seconds_median": loss_median,
            "seconds_per_1000_input_tokens": 1000 * median / input_tokens,
            "relative_to_loss": median / loss_median,
            "tokens_run": tokens_run[method],
            "seconds": seconds[method],
            "loss_seconds": loss_beside[method],
        }
        print(
            f"{method:10s} {1000 * median / input_tokens:7.2f} s per 1000 input tokens, "
            f"{median / loss_median:6.2f}x loss"
        )
    per_pass = {}
    for kind in pass_kinds:
        median = statistics.median(pass_seconds[kind])
        per_pass[kind] = {
            "seconds_median": median,
            "tokens_run": pass_tokens[kind],
            "tokens_per_second": pass_tokens[kind] / median,
            "seconds": pass_seconds[kind],
        }
        print(f"{kind:60s} {pass_tokens[kind] / median:8.0f} tokens/s")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / (f"method-cost-{os.cpu_count()}core" + (f"-{args.tag}" if args.tag else "") + ".json")
    settings = {
        "texts": args.texts,
        "max_words": args.max_words,
        "rounds": args.rounds,
        "input_tokens": input_tokens,
        "model": loaded.name,
        "dtype": "fp32",
        "samia_samples": options.of(SamiaSettings).samples,
        "pac_copies": options.of(PacSettings).copies,
        "neighbors": options.of(NeighborSettings).neighbors.count,
        "nonmembers": NONMEMBERS,
        "fsd_tuning": recorded(fsd_tuning),
        "fsd_fine_tune_seconds": fine_tune_s,
    }
    path.write_text(
        json.dumps(
            {
                "benchmark": "method-cost",
                "machine": machine(),
                "settings": settings,
                "methods": per_method,
                "passes": per_pass,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
