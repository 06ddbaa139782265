"""What each method costs against its floor: wall time relative to loss alone, the tokens its passes must run
relative to the plain pass's, and the throughput of each kind of pass, in one process on the built-in
SmolLM2-135M (fp32).

Every method is scored on its own (a fresh ``Detector.score`` call with just that method), its rounds
interleaved with loss-only rounds so that machine noise hits both alike; medians over the rounds.
The texts are the first ``--texts`` wikipedia_en texts cut to ``--max-words`` words; the prefixes of
recall and conrecall are 4 other wikipedia_en texts each (as the demo draws them); the frequencies of
dcpdd are counted over 500 pile_cc documents; ref's reference model is a second copy of the built-in
model (a reference of the same size); neighbor makes 25 word-drop neighbours per text; probe reads
the middle layer with an untrained probe of the trained shape (its cost does not depend on its
weights); ref, ezmia and wbc share that reference; camia and fsd_* read 16 other wikipedia_en texts as known
non-members (camia's reference set, fsd's fine-tuning set). What runs once per detector is made before the
timed rounds and timed apart: camia's calibration (its passes over the non-members) and fsd's fine-tuned copy
(the fine-tune is timed on a fresh copy, as the detector reads its copy from the cache of fine-tuned models
once one exists). Each pass kind is also run alone through the pass planner (``run_passes``): tokens run
(prefix, transformed text, generated tokens) per second.

The floor of a method is the work its passes must do, in forwards of one target token, over the plain pass's
tokens: derived from the passes it declares (``Method.passes``) and the ids its texts actually tokenize to, each
distinct (model, readout, prefix, transformed text) counted once, as the planner runs it (so a text already lower
case adds nothing to lowercase). A pass's own text tokens count once per text; a prefix (recall, conrecall) counts
once per run, as a prefix cached once and attended to by every text would cost: over ``--texts`` texts, which the
table says; sampling counts its prompt once per text (its samples share one prefill) plus every generated token;
token spans (ezmia, wbc) run no forward. The modelling constants (not measured): ``BACKWARD_FORWARDS``, a backward
costs two forwards (gradnorm: 3 per token; fsd's fine-tune: 3 per token and epoch); a forward's cost is
proportional to the model's parameters (a reference of the same size: 1); a hidden-state readout that stops after
decoder layer L of n runs (L + 1) / n of a forward (the probe); a generated token costs one forward token. Work done
once per detector (camia's calibration, fsd's fine-tune) has its floor and time apart.

    python benchmarks/method_cost.py [--texts 16] [--max-words 100] [--rounds 3] [--methods loss,camia] [--tag T]

Writes ``results/method-cost-<cores>core[-<tag>].json`` and prints the markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

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
from mia_fast.engines.passes import (
    PLAIN,
    TARGET,
    GradientNormReadout,
    HiddenStatesReadout,
    Identity,
    Pass,
    Progress,
    SamplesReadout,
    TokenSpansReadout,
    TokenStatsReadout,
)
from mia_fast.frequency.build import count_token_ids
from mia_fast.generation.finetune import fine_tune
from mia_fast.generation.neighbors import WordDropNeighbors
from mia_fast.methods import REGISTRY, NgramCoverageSettings
from mia_fast.methods.camia import REPEATED
from mia_fast.methods.conrecall import member_prefix_pass
from mia_fast.methods.fsd import on_finetuned
from mia_fast.methods.gradnorm import gradnorm_pass
from mia_fast.methods.neighbor import neighbor_passes
from mia_fast.methods.ngram_coverage import ngram_pass, word_tools
from mia_fast.methods.pac import pac_passes
from mia_fast.methods.probe import Probe
from mia_fast.methods.recall import recall_pass
from mia_fast.methods.reference_tokens import token_passes
from mia_fast.methods.samia import samia_pass
from mia_fast.methods.settings import recorded
from mia_fast.pipeline.models import LoadedModel, load_model
from mia_fast.scoring.method_runs import calibration_sets
from mia_fast.scoring.planner import run_passes
from mia_fast.tokens.tokenize import tokenize

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
    "samia_zlib",
    "pac",
    "gradnorm",
    "probe",
    "gapk",
    "surp",
    "minkpp_top5",
    "minkpp_top10",
    "minkpp_top20",
    "camia",
    "ezmia",
    "wbc",
    "fsd_loss",
    "fsd_zlib",
    "fsd_mink",
    "fsd_minkpp",
    "fsd_lowercase",
    "ngram_coverage",
]
# Registered methods left out of the default list, and why (``--methods`` still runs them).
LEFT_OUT = {
    "ngram_creativity": "ngram_coverage's one sampling pass read another way: its cost, ~65x loss, again",
}
NONMEMBERS = 16
# The floor's modelling constant: a backward pass costs about two forwards (gradnorm's forward and backward: 3).
BACKWARD_FORWARDS = 2.0


def parameters(engine: Any) -> int:
    return sum(p.numel() for p in engine.loaded.model.parameters())


def pass_label(p: Pass) -> str:
    """A pass's kind: its model (other than the target), transform, prefix and readout (other than TokenStats)."""
    parts = [] if p.model == TARGET else [p.model]
    if not isinstance(p.transform, Identity):
        parts.append(type(p.transform).__name__)
    if p.prefix:
        parts.append("after a prefix")
    if not isinstance(p.readout, TokenStatsReadout):
        parts.append(type(p.readout).__name__.removesuffix("Readout"))
    return " ".join(parts) or "plain"


def readout_tokens(
    engine: Any, readout: Any, texts: Sequence[str], prefixes: Sequence[str]
) -> tuple[float, float, float]:
    """The forward tokens ``readout`` must run over ``texts`` (each once) and, apart, over ``prefixes`` (each once per
    run), and of the first how many are generated: ids as the engine tokenizes them, weighted by the floor's constants
    (module docstring)."""
    if isinstance(readout, TokenSpansReadout):
        return 0.0, 0.0, 0.0  # offsets of the tokenizer: no forward
    ids = engine.tokenize(list(texts)) if texts else []
    once = sum(len(engine.context_ids(prefix)) for prefix in prefixes)
    if isinstance(readout, SamplesReadout):
        # The prompt once per text (its samples share one prefill), then every token of every sample.
        prompts = generated = 0.0
        for text, text_ids in zip(texts, ids):
            if text:
                prompts += len(text_ids)
                generated += readout.count * min(
                    readout.new_tokens or max(len(text_ids) - 1, 1), engine.max_length // 2
                )
        return prompts + generated, float(once), generated
    share = 1.0
    if isinstance(readout, GradientNormReadout):
        share = 1 + BACKWARD_FORWARDS
    elif isinstance(readout, HiddenStatesReadout):
        layers = len(engine.loaded.decoder_layers())
        share = (max(readout.layers) + 1) / layers if readout.layers else 1.0
    return share * sum(map(len, ids)), share * once, 0.0


def floor_of(detector: Detector, passes: Sequence[Pass], texts: Sequence[str]) -> dict[str, dict[str, float]]:
    """Each kind of pass among ``passes`` over ``texts`` (``pass_label``): how many passes, the forward tokens of their
    texts (of which ``generated`` were sampled) and, apart, of their prefixes (once per run). Each distinct (model,
    readout, prefix, transformed text) counts once, under the first pass that asks for it, as the planner runs it; a
    model made from the target's weights (fsd's fine-tuned copy) is the target's size and tokenizer."""
    target_size = parameters(detector.target)
    seen: dict[tuple[str, Any], tuple[set, set]] = {}
    kinds: dict[str, dict[str, float]] = {}
    for p in passes:
        engine = detector.engines.get(p.model, detector.target)
        scale = parameters(engine) / target_size
        units, prefixes = seen.setdefault((p.model, p.readout), (set(), set()))
        new_texts = []
        for text in texts:
            unit = (p.prefix, p.transform(text))
            if unit not in units:
                units.add(unit)
                new_texts.append(unit[1])
        new_prefixes = [p.prefix] if p.prefix and p.prefix not in prefixes else []
        prefixes.update(new_prefixes)
        tokens, once, generated = readout_tokens(engine, p.readout, new_texts, new_prefixes)
        kind = kinds.setdefault(pass_label(p), {"passes": 0, "tokens": 0.0, "once": 0.0, "generated": 0.0})
        kind["passes"] += 1
        kind["tokens"] += scale * tokens
        kind["once"] += scale * once
        kind["generated"] += scale * generated
    return kinds


def method_floor(detector: Detector, method: str, texts: Sequence[str], plain_tokens: int) -> dict[str, Any]:
    """The floor of ``method`` over ``texts`` as multiples of ``plain_tokens``: per text (its passes' own tokens),
    with the prefixes once per run, each kind of pass's share, and the work once per detector (calibration)."""
    settings = detector.settings
    requests = detector.requests([method])
    kinds = floor_of(detector, REGISTRY[method].passes(settings), texts)
    per_text = sum(k["tokens"] for k in kinds.values()) / plain_tokens
    once = sum(k["once"] for k in kinds.values()) / plain_tokens
    calibration = {
        len(known): sum(k["tokens"] + k["once"] for k in floor_of(detector, passes, known).values()) / plain_tokens
        for known, passes in calibration_sets(requests, settings).items()
    }
    return {
        "floor": per_text + once,
        "floor_per_text": per_text,
        "floor_prefixes_once": once,
        "floor_passes": {
            label: {key: value if key == "passes" else value / plain_tokens for key, value in k.items()}
            for label, k in kinds.items()
        },
        "calibration_floor": sum(calibration.values()) if calibration else None,
        "calibration_texts": sum(calibration) if calibration else None,
    }


def describe_floor(floor: dict[str, Any]) -> str:
    """The floor's terms, e.g. ``plain 1.00 + Repeated 5.98``; a prefix's ``(+0.52 once)``; sampling's prompts and
    generated tokens; a pass that runs no forward ``0``."""
    terms = []
    for label, kind in floor["floor_passes"].items():
        count = f" ×{kind['passes']}" if kind["passes"] > 1 else ""
        once = f" (+{kind['once']:.2f} once)" if kind["once"] else ""
        if kind["generated"]:
            prompts = kind["tokens"] - kind["generated"]
            terms.append(f"{label} {prompts:.2f} prompts + {kind['generated']:.2f} generated{once}")
        else:
            terms.append(f"{label}{count} {kind['tokens']:.2f}{once}" if kind["tokens"] else f"{label}{count} 0")
    return " + ".join(terms)


def fine_tune_floor(detector: Detector, plain_tokens: int) -> float:
    """fsd's fine-tune as multiples of the plain pass's tokens: every (cut) non-member's ids, each epoch, forward and
    backward."""
    tuning = detector.settings.of(FsdSettings).tuning
    ids = tokenize(
        detector.target.loaded.tokenizer, list(detector.settings.of(FsdSettings).nonmembers), prepend_start=True
    )
    cut = [i[: tuning.max_tokens + 1] if tuning.max_tokens is not None else i for i in ids]
    return sum(map(len, cut)) * tuning.epochs * (1 + BACKWARD_FORWARDS) / plain_tokens


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
    from common import RESULTS, machine, pile_texts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=16)
    parser.add_argument("--max-words", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated (default: every method but {', '.join(LEFT_OUT)})",
    )
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
    frequencies = []
    if "dcpdd" in methods:
        counts = count_token_ids(
            np.concatenate(
                [
                    np.asarray(i, np.int64)
                    for i in loaded.tokenizer(pile_texts("pile_cc", n=500, max_words=None))["input_ids"]
                ]
            ),
            loaded.vocab_size,
        )
        frequencies = [DcpddSettings(frequencies=counts)]
    detector = Detector(
        ModelConfig(loaded, ref_model=reference, prepend_start=False),
        [
            *frequencies,
            RecallSettings(prefix_nonmembers=prefix_nonmembers),
            ConRecallSettings(prefix_members=prefix_members),
            NeighborSettings(WordDropNeighbors()),
            ProbeSettings(untrained_probe(loaded)),
            CamiaSettings(nonmembers=nonmembers),
            FsdSettings(nonmembers=nonmembers),
        ],
    )
    options = detector.settings
    plain_tokens = sum(map(len, detector.target.tokenize(texts)))
    input_tokens = int(detector.target.scored_positions(texts).sum() + len(texts))
    floors = {method: method_floor(detector, method, texts, plain_tokens) for method in methods}

    def loss_round() -> float:
        return timed(lambda on_tokenized: detector.score(texts, methods=["loss"], on_tokenized=on_tokenized))[0]

    # Once per detector, before the timed rounds, each beside a loss round. FSD fine-tunes a copy once per non-member
    # set and settings, then reads it from its cache: the fine-tune is timed on a fresh copy, and the detector's own
    # copy made (or read).
    fsd_tuning = options.of(FsdSettings).tuning
    fine_tune_s = fine_tune_loss_s = None
    fsd_methods = [m for m in methods if m.startswith("fsd_")]
    if fsd_methods:
        fine_tune_loss_s = loss_round()
        fine_tune_s, _ = timed(
            lambda on_tokenized: fine_tune(
                LoadedModel(copy.deepcopy(loaded.model), loaded.tokenizer, loaded.name, loaded.device, loaded.dtype),
                nonmembers,
                fsd_tuning,
            )
        )
        detector.engines_for([p for m in fsd_methods for p in REGISTRY[m].passes(options)], options)
    # The word tools of the n-gram coverage attack (NLTK, sacremoses, unidecode): imported once per process.
    word_tools_s = None
    if {"ngram_coverage", "ngram_creativity"} & set(methods):
        started = time.perf_counter()
        word_tools()
        word_tools_s = time.perf_counter() - started
    # Calibration (camia's non-members through its passes): run once, kept by the detector.
    calibration_s: dict[str, float] = {}
    calibration_loss_s: dict[str, float] = {}
    for method in methods:
        for known, passes in calibration_sets(detector.requests([method]), options).items():
            calibration_loss_s[method] = loss_round()
            started = time.perf_counter()
            detector.calibration_inputs(known, passes, options)
            calibration_s[method] = calibration_s.get(method, 0.0) + time.perf_counter() - started
            print(f"{method}: calibration over {len(known)} texts {calibration_s[method]:.1f} s", flush=True)

    # Each kind of pass, with the methods that read it (the plain pass: every run).
    every_kind = {
        "plain (TokenStats)": ([PLAIN], methods),
        "non-member prefix (recall)": ([recall_pass(options)], ["recall", "conrecall"]),
        "member prefix (conrecall)": ([member_prefix_pass(options)], ["conrecall"]),
        "one neighbour rank": (neighbor_passes(options)[:1], ["neighbor"]),
        "one word-swapped copy (pac)": (pac_passes(options)[:1], ["pac"]),
        "samia sampling (10 per text; prompt + generated tokens)": ([samia_pass(options)], ["samia", "samia_zlib"]),
        "gradient norm (forward + backward, one text at a time)": ([gradnorm_pass(options)], ["gradnorm"]),
        "probe hidden states (stops at its layer)": ([options.of(ProbeSettings).probe.scoring_pass], ["probe"]),
        "text repeated 6 times (camia)": ([REPEATED], ["camia"]),
        "token spans of both models (ezmia, wbc; no forward)": (list(token_passes(options)[2:]), ["ezmia", "wbc"]),
        "plain on the fine-tuned copy (fsd_*)": ([on_finetuned(PLAIN)], fsd_methods),
        "ngram_coverage sampling (20 per text)": ([ngram_pass(options)], ["ngram_coverage", "ngram_creativity"]),
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
                    detector.engines_for(passes, options), texts, passes, Progress(on_tokenized)
                )
            )
            pass_seconds[kind].append(pass_s)

    per_method = {}
    for method in methods:
        median, loss_median = statistics.median(seconds[method]), statistics.median(loss_beside[method])
        relative = median / loss_median
        per_method[method] = {
            "seconds_median": median,
            "loss_seconds_median": loss_median,
            "seconds_per_1000_input_tokens": 1000 * median / input_tokens,
            "relative_to_loss": relative,
            "tokens_run": tokens_run[method],
            **floors[method],
            "relative_to_floor": relative / floors[method]["floor"] if floors[method]["floor"] else None,
            "calibration_seconds": calibration_s.get(method),
            "calibration_loss_seconds": calibration_loss_s.get(method),
            "calibration_relative_to_loss": (
                calibration_s[method] / calibration_loss_s[method] if method in calibration_s else None
            ),
            "seconds": seconds[method],
            "loss_seconds": loss_beside[method],
        }
        print(f"{method}: {relative:.2f}x loss, floor {floors[method]['floor']:.2f}", flush=True)
    tuning_cost = None
    if fine_tune_s is not None:
        tuning_cost = {
            "seconds": fine_tune_s,
            "loss_seconds": fine_tune_loss_s,
            "relative_to_loss": fine_tune_s / fine_tune_loss_s,
            "floor": fine_tune_floor(detector, plain_tokens),
        }
    per_pass = {}
    for kind in pass_kinds:
        median = statistics.median(pass_seconds[kind])
        per_pass[kind] = {
            "seconds_median": median,
            "tokens_run": pass_tokens[kind],
            "tokens_per_second": pass_tokens[kind] / median if median else None,
            "seconds": pass_seconds[kind],
        }
    print()
    print(markdown_tables(per_method, per_pass, tuning_cost, args.texts, plain_tokens))
    if word_tools_s is not None:
        print(f"\nngram_*: importing its word tools (once per process) {word_tools_s:.1f} s")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / (f"method-cost-{os.cpu_count()}core" + (f"-{args.tag}" if args.tag else "") + ".json")
    settings = {
        "texts": args.texts,
        "max_words": args.max_words,
        "rounds": args.rounds,
        "input_tokens": input_tokens,
        "plain_tokens": plain_tokens,
        "model": loaded.name,
        "dtype": "fp32",
        "samia_samples": options.of(SamiaSettings).samples,
        "pac_copies": options.of(PacSettings).copies,
        "neighbors": options.of(NeighborSettings).neighbors.count,
        "ngram_samples": options.of(NgramCoverageSettings).samples,
        "nonmembers": NONMEMBERS,
        "backward_forwards": BACKWARD_FORWARDS,
        "fsd_tuning": recorded(fsd_tuning),
        "fsd_fine_tune_seconds": fine_tune_s,
        "ngram_word_tools_import_seconds": word_tools_s,
    }
    path.write_text(
        json.dumps(
            {
                "benchmark": "method-cost",
                "machine": machine(),
                "settings": settings,
                "methods": per_method,
                "fsd_fine_tune": tuning_cost,
                "passes": per_pass,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {path}")


def markdown_tables(
    per_method: dict[str, dict], per_pass: dict[str, dict], tuning: dict | None, texts: int, plain_tokens: int
) -> str:
    """The methods against their floors, the work once per detector, and each kind of pass's throughput."""
    lines = [
        f"| method | s (median) | loss beside it, s | × loss | tokens run | floor (× plain, {texts} texts) | "
        "measured / floor | floor's terms (× plain tokens) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for method, row in per_method.items():
        ratio = row["relative_to_floor"]
        lines.append(
            f"| {method} | {row['seconds_median']:.1f} | {row['loss_seconds_median']:.1f} | "
            f"{row['relative_to_loss']:.2f} | {row['tokens_run']:,} | {row['floor']:.2f} | "
            f"{'–' if ratio is None else f'{ratio:.2f}'} | {describe_floor(row)} |"
        )
    once = [
        f"| {method} calibration ({row['calibration_texts']} texts) | {row['calibration_seconds']:.1f} | "
        f"{row['calibration_loss_seconds']:.1f} | {row['calibration_relative_to_loss']:.2f} | "
        f"{row['calibration_floor']:.2f} | "
        f"{row['calibration_relative_to_loss'] / row['calibration_floor']:.2f} |"
        for method, row in per_method.items()
        if row["calibration_seconds"] is not None
    ]
    if tuning is not None:
        once.append(
            f"| fsd fine-tune | {tuning['seconds']:.1f} | {tuning['loss_seconds']:.1f} | "
            f"{tuning['relative_to_loss']:.2f} | "
            f"{tuning['floor']:.2f} | {tuning['relative_to_loss'] / tuning['floor']:.2f} |"
        )
    if once:
        lines += [
            "",
            f"Once per detector (plain pass: {plain_tokens:,} tokens):",
            "",
            "| work | s | loss beside it, s | × loss | floor (× plain) | measured / floor |",
            "|---|---:|---:|---:|---:|---:|",
            *once,
        ]
    lines += ["", "| pass | tokens run | s (median) | tokens/s |", "|---|---:|---:|---:|"]
    for kind, row in per_pass.items():
        rate = "–" if row["tokens_per_second"] is None or not row["tokens_run"] else f"{row['tokens_per_second']:.0f}"
        tokens = f"{row['tokens_run']:,}" if row["tokens_run"] else "no forward"
        lines.append(f"| {kind} | {tokens} | {row['seconds_median']:.1f} | {rate} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
