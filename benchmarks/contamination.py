"""Does detection rise with the strength of contamination? The controlled experiment on real text.

    python benchmarks/contamination.py [--texts 128] [--lrs 1e-5,1e-4,3e-4] [--epochs 1,3] [--max-tokens 128]
                                       [--methods loss,zlib,mink,minkpp,lowercase,ref] [--tag NAME]

The shared pile_test documents (their four subsets interleaved) are split i.i.d. into members and
non-members; the built-in SmolLM2-135M is fine-tuned on the members at every learning rate and
epoch count, each run from the untouched model, and both halves are scored (the untouched model is
the reference of ``ref``, ``ezmia`` and ``wbc``). Min-K% Prob's paper (Table 4) found detection rising sharply with the
learning rate. Writes ``results/contamination-<cores>core[-<tag>].json``, a plot, and one report per
run under ``--reports``. With ``recall`` or ``conrecall``, the experiment draws their prefixes beside
its texts (never scored), as ``mia-fast demo`` does; with ``camia`` or ``fsd_*``, ``--known-nonmembers`` known
non-members (never trained on, never scored). With ``dcpdd``, its token frequencies are counted
over the subsets' documents the experiment never draws from (the last ``--freq-docs`` of each).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast.api import DcpddSettings, NeighborSettings, NgramCoverageSettings, SamiaSettings, ScoringConfig
from mia_fast.cli.options import bounded_list, positive_ints
from mia_fast.evaluation.experiments import KNOWN_NONMEMBERS, ExperimentDesign, FineTuning, run_experiment
from mia_fast.frequency.build import count_token_ids
from mia_fast.generation.neighbors import DEFAULT_NEIGHBORS, WordDropNeighbors
from mia_fast.methods import REGISTRY
from mia_fast.methods.ngram_coverage import DEFAULT_SAMPLES as DEFAULT_NGRAM_SAMPLES
from mia_fast.methods.samia import DEFAULT_SAMPLES as DEFAULT_SAMIA_SAMPLES
from mia_fast.methods.settings import POSITIVE
from mia_fast.pipeline.models import LoadedModel, load_model

SUBSETS = ("wikipedia_en", "pile_cc", "pubmed_abstracts", "stackexchange")
METHODS = "loss,zlib,mink,minkpp,lowercase,ref"
K_SHOWN = 0.2


def shown_columns(methods: list[str]) -> list[str]:
    """One column per method: k-methods at k = 0.2."""
    return [f"{m}_{K_SHOWN}" if REGISTRY[m].takes_k else m for m in methods]


def interleaved_corpus(per_subset: int) -> list[str]:
    subsets = [pile_texts(name, n=per_subset, max_words=None) for name in SUBSETS]
    return [text for group in zip(*subsets) for text in group]


def reference_counts(tokenizer, vocab_size: int, skip: int, docs: int) -> np.ndarray:
    """Token counts of documents skip .. skip + docs of every subset: none of them is in the experiment's corpus."""
    texts = [t for name in SUBSETS for t in pile_texts(name, n=skip + docs, max_words=None)[skip:]]
    ids = np.concatenate(
        [np.asarray(i, dtype=np.int64) for i in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    )
    return count_token_ids(ids, vocab_size)


def plot(path: Path, runs: list[dict], shown: list[str]) -> None:
    """AUROC against the learning rate, a panel per epoch count; one or two runs: each method's AUROC with its CI,
    a panel per run, in the order of the first run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(runs) <= 2:
        ordered = sorted(shown, key=lambda c: runs[0]["auroc"][c])
        fig, axes = plt.subplots(
            1, len(runs), figsize=(6.4 * len(runs), 0.32 * len(ordered) + 1.4), squeeze=False, sharey=True
        )
        for ax, run in zip(axes[0], runs):
            lows, highs = zip(*(run["auroc_ci"][c] for c in ordered))
            values = [run["auroc"][c] for c in ordered]
            ax.barh(
                ordered,
                values,
                xerr=[[v - lo for v, lo in zip(values, lows)], [hi - v for v, hi in zip(values, highs)]],
                color="tab:blue",
                alpha=0.75,
                capsize=3,
            )
            ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
            ax.set_xlim(0, 1)
            ax.set_xlabel("AUROC with 95% bootstrap CI (members vs held-out non-members)")
            ax.set_title(
                f"lr {run['learning_rate']:g}, {run['epochs']} epoch(s): {run['members']} + {run['nonmembers']} texts",
                fontsize=10,
            )
            ax.grid(axis="x", alpha=0.3)
    else:
        epochs = sorted({r["epochs"] for r in runs})
        fig, axes = plt.subplots(1, len(epochs), figsize=(6 * len(epochs), 4.2), squeeze=False, sharey=True)
        for ax, epoch in zip(axes[0], epochs):
            chosen = sorted((r for r in runs if r["epochs"] == epoch), key=lambda r: r["learning_rate"])
            for column, marker in zip(shown, "osD^v<>pPX*hH8d" * 2):
                ax.plot(
                    [r["learning_rate"] for r in chosen],
                    [r["auroc"][column] for r in chosen],
                    marker=marker,
                    label=column,
                )
            ax.set_xscale("log")
            ax.set_xlabel("learning rate")
            ax.set_title(f"{epoch} epoch(s) of fine-tuning on the members")
            ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("AUROC (members vs held-out non-members)")
        axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=128, help="texts per run, half of them members")
    parser.add_argument("--lrs", type=bounded_list(POSITIVE), default=[1e-5, 1e-4, 3e-4])
    parser.add_argument("--epochs", type=positive_ints, default=[1, 3])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default=METHODS, help=f"comma-separated (default {METHODS})")
    parser.add_argument(
        "--neighbor-count",
        type=int,
        default=DEFAULT_NEIGHBORS,
        help=f"for neighbor: word-drop neighbours per text (default {DEFAULT_NEIGHBORS})",
    )
    parser.add_argument(
        "--samia-samples",
        type=int,
        default=DEFAULT_SAMIA_SAMPLES,
        help=f"for samia: samples per text (default {DEFAULT_SAMIA_SAMPLES})",
    )
    parser.add_argument(
        "--ngram-samples",
        type=int,
        default=DEFAULT_NGRAM_SAMPLES,
        help=f"for ngram_coverage and ngram_creativity: samples per text (default {DEFAULT_NGRAM_SAMPLES})",
    )
    parser.add_argument(
        "--freq-docs",
        type=int,
        default=500,
        help="for dcpdd: documents per subset counted for its frequencies (default 500)",
    )
    parser.add_argument(
        "--known-nonmembers",
        type=int,
        default=KNOWN_NONMEMBERS,
        help=f"for camia and fsd_*: known non-members drawn beside the texts (default {KNOWN_NONMEMBERS})",
    )
    parser.add_argument("--tag", help="suffix of the result files, so a run with other methods keeps the default's")
    parser.add_argument("--reports", type=Path, default=Path(tempfile.gettempdir()) / "mia-fast-contamination")
    args = parser.parse_args()
    methods = args.methods.split(",")
    shown = shown_columns(methods)

    per_subset = max(64, args.texts)
    corpus = interleaved_corpus(per_subset)
    base = load_model(device="cpu", dtype="fp32")
    counts = (
        reference_counts(base.tokenizer, base.vocab_size, per_subset, args.freq_docs) if "dcpdd" in methods else None
    )
    untouched = copy.deepcopy(base.model.state_dict())
    runs = []
    for epochs in args.epochs:
        for lr in args.lrs:
            base.model.load_state_dict(untouched)
            loaded = LoadedModel(base.model, base.tokenizer, base.name, base.device, base.dtype)
            started = time.perf_counter()
            method_settings = [
                SamiaSettings(samples=args.samia_samples, seed=args.seed),
                NgramCoverageSettings(samples=args.ngram_samples, seed=args.seed),
            ]
            if counts is not None:
                method_settings.append(DcpddSettings(frequencies=counts))
            if "neighbor" in methods:
                method_settings.append(NeighborSettings(WordDropNeighbors(args.neighbor_count, seed=args.seed)))
            experiment, assessed = run_experiment(
                loaded,
                corpus,
                args.reports / f"lr{lr:g}-ep{epochs}",
                ExperimentDesign(
                    tuning=FineTuning(epochs, lr, 8, args.max_tokens, args.seed),
                    texts=args.texts,
                    known_nonmembers=args.known_nonmembers,
                    bootstrap=1000,
                ),
                ScoringConfig(methods=methods, settings=method_settings),
                corpus_name="pile_test (4 subsets)",
            )
            run = {
                "learning_rate": lr,
                "epochs": epochs,
                "members": len(experiment.members),
                "nonmembers": len(experiment.nonmembers),
                "first_loss": experiment.losses[0],
                "last_loss": experiment.losses[-1],
                "seconds": time.perf_counter() - started,
                "seconds_score": experiment.seconds["score"],
                "auroc": {name: r.auroc for name, r in assessed.results.items()},
                "auroc_ci": {name: r.auroc_ci for name, r in assessed.results.items()},
                "tpr_at_1%_fpr": {name: r.tpr_at_fpr["1%"] for name, r in assessed.results.items()},
            }
            runs.append(run)
            print(
                f"lr {lr:g}, {epochs} epoch(s): loss {run['first_loss']:.3f} -> {run['last_loss']:.3f}; "
                + ", ".join(f"{c} {run['auroc'][c]:.3f}" for c in shown),
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / (f"contamination-{os.cpu_count()}core" + (f"-{args.tag}" if args.tag else ""))
    settings = {
        "methods": methods,
        "texts": args.texts,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "batch_size": 8,
        "corpus": "pile_test (4 subsets)",
        "model": base.name,
        "neighbors": f"{args.neighbor_count} word-drop",
        "samia_samples": args.samia_samples,
        "ngram_samples": args.ngram_samples,
        "known_nonmembers": args.known_nonmembers,
        **({"freq_docs_per_subset": args.freq_docs, "freq_tokens": int(counts.sum())} if counts is not None else {}),
    }
    stem.with_suffix(".json").write_text(
        json.dumps({"benchmark": "contamination", "machine": machine(), "settings": settings, "runs": runs}, indent=2)
        + "\n"
    )
    plot(stem.with_suffix(".png"), runs, shown)
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
