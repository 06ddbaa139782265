"""The probe in a controlled experiment on real text, beside loss, Min-K% and Min-K%++, and what it costs.

For each seed: draw passages from ``../shared/data/pile_test`` (4 subsets, each cut to 128 tokens);
split them i.i.d. into members and non-members; fine-tune the built-in model on the members (as
``mia-fast demo`` does); hold a quarter of each class out as the probe's dev set (fine-tuned on, never
evaluated); train the probe against the fine-tuned model with a disjoint probe training set (half of
it its proxy's members), once per proxy learning rate, keeping the one with the best dev AUROC; then
score the remaining members and non-members with every method and report AUROC with bootstrap CI,
the probe under both normalisations. Wall times: ``train_probe`` (per proxy learning rate), and the
median of interleaved rounds of scoring with the probe alone, with loss alone and with every method,
on the same texts in the same run. Writes ``results/probe-<cores>core.json`` and a
dev-AUROC-by-layer figure per seed.

    python benchmarks/probe.py [--seeds 0,1] [--texts 128] [--probe-texts 100] [--lrs 1e-3,3e-3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast import Detector, ProbeSettings, load_model
from mia_fast.data import Dataset
from mia_fast.evaluation import metrics
from mia_fast.evaluation.corpus import prepare_texts, split_members
from mia_fast.evaluation.figures import plot_dev_auroc
from mia_fast.evaluation.probe_training import ProbeTraining, train_probe
from mia_fast.generation.finetune import FineTuning, fine_tune

SUBSETS = ("wikipedia_en", "pile_cc", "pubmed_abstracts", "stackexchange")
METHODS = ["loss", "mink_0.2", "minkpp_0.2"]


def timed(fn):
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    loaded = load_model(device="cpu", dtype="fp32")
    corpus = [t for subset in SUBSETS for t in pile_texts(subset, n=1000, max_words=None)]
    drawn = prepare_texts(corpus, loaded.tokenizer, args.texts + args.probe_texts, 128, seed)
    members, nonmembers = split_members(drawn[: args.texts], seed)
    held = len(members) // 4
    dev = Dataset(members[:held] + nonmembers[:held], None, [1] * held + [0] * held)
    evaluated = members[held:] + nonmembers[held:]
    labels = np.r_[np.ones(len(members) - held, np.int8), np.zeros(len(nonmembers) - held, np.int8)]
    proxy_members, proxy_nonmembers = split_members(drawn[args.texts :], seed + 7)
    probe_train = Dataset(
        proxy_members + proxy_nonmembers, None, [1] * len(proxy_members) + [0] * len(proxy_nonmembers)
    )

    losses, fine_tune_seconds = timed(
        lambda: fine_tune(
            loaded, members, FineTuning(epochs=3, learning_rate=1e-4, batch_size=8, max_tokens=128, seed=seed)
        )
    )
    trainings = {}
    for lr in args.lrs:
        report, seconds = timed(
            lambda lr=lr: train_probe(loaded, probe_train, dev, ProbeTraining(learning_rate=lr, seed=seed))
        )
        trainings[lr] = (report, seconds)
    chosen = max(trainings, key=lambda lr: max(trainings[lr][0].dev_auroc["split"]))
    report, train_seconds = trainings[chosen]
    plot_dev_auroc(RESULTS / f"probe-dev-auroc-seed{seed}.png", report.dev_auroc, report.probe.layer)

    detector = Detector(loaded, [ProbeSettings(report.probe)])
    scoring = {
        "score_loss_only": lambda: detector.score(evaluated, methods=["loss"]),
        "score_probe_only": lambda: detector.score(evaluated, methods=["probe"]),
        "score_loss_mink_minkpp_probe": lambda: detector.score(evaluated, methods=[*METHODS, "probe"]),
    }
    seconds = {name: [] for name in scoring}
    for _ in range(args.timing_rounds):  # interleaved, so that machine noise hits them alike
        for name, fn in scoring.items():
            seconds[name].append(timed(fn)[1])
    scores = scoring["score_loss_mink_minkpp_probe"]()
    train_normalised = Detector(loaded, [ProbeSettings(report.probe, normalization="train")]).score(
        evaluated, methods=["probe"]
    )
    columns = {
        **{m: scores[m] for m in METHODS},
        "probe (split)": scores["probe"],
        "probe (train)": train_normalised["probe"],
    }
    results = metrics.evaluate(labels, columns, resamples=1000, seed=seed)
    return {
        "seed": seed,
        "members_evaluated": int(labels.sum()),
        "nonmembers_evaluated": int(len(labels) - labels.sum()),
        "dev": {"members": held, "nonmembers": held},
        "probe_train": {"members": len(proxy_members), "nonmembers": len(proxy_nonmembers)},
        "target_fine_tune": {"first_loss": losses[0], "last_loss": losses[-1], "seconds": fine_tune_seconds},
        "proxy_lrs": {
            str(lr): {
                "best_dev_auroc_split": max(r.dev_auroc["split"]),
                "layer": r.probe.layer,
                "proxy_losses": r.proxy_losses,
                "seconds": s,
            }
            for lr, (r, s) in trainings.items()
        },
        "chosen_proxy_lr": chosen,
        "probe_layer": report.probe.layer,
        "dev_auroc_by_layer": report.dev_auroc,
        "auroc": {
            name: {"auroc": r.auroc, "ci": list(r.auroc_ci), "tpr_at_1pct_fpr": r.tpr_at_fpr["1%"]}
            for name, r in results.items()
        },
        "seconds": {
            "train_probe": train_seconds,
            **{name: statistics.median(values) for name, values in seconds.items()},
        },
        "scoring_seconds_by_round": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument(
        "--texts", type=int, default=128, help="experiment texts, half members; a quarter of each class is the dev set"
    )
    parser.add_argument(
        "--probe-texts", type=int, default=100, help="the probe's training set, half its proxy's members"
    )
    parser.add_argument("--lrs", default="1e-3,3e-3", help="proxy learning rates; the best dev AUROC is kept")
    parser.add_argument(
        "--timing-rounds", type=int, default=3, help="interleaved rounds of the three scorings; medians are reported"
    )
    args = parser.parse_args()
    args.lrs = [float(x) for x in args.lrs.split(",")]
    RESULTS.mkdir(exist_ok=True)
    runs = [run_seed(int(seed), args) for seed in args.seeds.split(",")]
    path = RESULTS / f"probe-{os.cpu_count()}core.json"
    path.write_text(
        json.dumps(
            {
                "benchmark": "probe",
                "machine": machine(),
                "model": "SmolLM2-135M (built-in), fp32",
                "texts": args.texts,
                "probe_texts": args.probe_texts,
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    for run in runs:
        print(f"seed {run['seed']}: probe layer {run['probe_layer']} (proxy lr {run['chosen_proxy_lr']:g})")
        for name, r in sorted(run["auroc"].items(), key=lambda item: -item[1]["auroc"]):
            print(
                f"  {name:<14} AUROC {r['auroc']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]  "
                f"TPR@1%FPR {'n/a' if r['tpr_at_1pct_fpr'] is None else format(r['tpr_at_1pct_fpr'], '.3f')}"
            )
        print("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in run["seconds"].items()))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
