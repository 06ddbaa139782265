"""How often the model-free baselines cry leak on random splits, and whether they still see a planted one.

    python benchmarks/blind_null.py [--sizes 6,20,100] [--shuffles 200] [--planted 20]

The texts: Wikipedia texts 150-399 of ``pile_test/wikipedia_en.jsonl.gz``, each cut to 100 words. For each size
(members per class) and each of ``--shuffles`` seeded draws, that many members and non-members are drawn from them
with labels at random: a true null. The blind baselines run as ``eval`` runs them (out of fold, their p-values
refitted on every shuffle, Holm over the three), beside a column of noise standing in for a method at chance (no
model is needed: on a true null a model's scores are at chance too). Counted per size: the runs whose report says
WARNING, and those that call the split leaky at all (WARNING or "leaks somewhat"), each with its Clopper-Pearson
95% CI; and, from the same runs, what the earlier rule (a baseline's bootstrap CI above 0.5, its p-value from
shuffles over fixed out-of-fold scores) would have said.

Then ``--planted`` draws per size of the planted-leak fixture (every member ends in ", written in 2026"): the share
that warns, beside the minimum detectable AUROC its report states.

Last, a weak leak shaped like ArxivMIA's (:func:`weak_leak_fixture`: 2,000 rows whose members are more often
Wikipedia passages and whose non-members more often Pile-CC ones, a bag-of-words AUROC of about 0.6 on all of
them), and ``--weak`` seeded draws of 100 + 100 rows of it: how often such a sample shows the leak, and the minimum
detectable AUROC its report states. Writes ``results/blind-null-<cores>core.json`` and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from mia_fast.evaluation import metrics
from mia_fast.evaluation.assessment import assess
from mia_fast.evaluation.blind import BLIND_COLUMNS, blind_scores
from mia_fast.evaluation.figures import pyplot, save_figure

FIRST, LAST = 150, 400
PLANTED = ", written in 2026"
WEAK_ROWS = 1000  # members, and as many non-members
WEAK_SHARE = 0.65  # of the members from Wikipedia, and of the non-members from Pile-CC
WEAK_SAMPLE = 100


def weak_leak_fixture(pile_texts) -> tuple[list[str], np.ndarray]:
    """2,000 rows of 100 words (read by ``common.pile_texts``): 1,000 members (650 Wikipedia passages, 350 Pile-CC
    ones) and 1,000 non-members (350 and 650): a weak, diffuse leak through topic and style."""
    wiki, web = pile_texts("wikipedia_en", n=WEAK_ROWS), pile_texts("pile_cc", n=WEAK_ROWS)
    cut = round(WEAK_SHARE * WEAK_ROWS)
    texts = wiki[:cut] + web[: WEAK_ROWS - cut] + wiki[cut:] + web[WEAK_ROWS - cut :]
    return texts, np.r_[np.ones(WEAK_ROWS), np.zeros(WEAK_ROWS)].astype(np.int64)


def weak_sample(texts: list[str], labels: np.ndarray, seed: int) -> tuple[list[str], np.ndarray]:
    """A seeded draw of WEAK_SAMPLE members and as many non-members of the fixture, members first."""
    rng = np.random.default_rng(seed)
    rows = np.r_[
        rng.choice(np.flatnonzero(labels == 1), WEAK_SAMPLE, replace=False),
        rng.choice(np.flatnonzero(labels == 0), WEAK_SAMPLE, replace=False),
    ]
    return [texts[i] for i in rows], labels[rows]


def clopper_pearson(hits: int, trials: int) -> list[float]:
    from scipy.stats import binomtest

    interval = binomtest(hits, trials).proportion_ci(method="exact")
    return [float(interval.low), float(interval.high)]


def earlier_rule(labels: np.ndarray, columns: dict[str, np.ndarray], resamples: int, seed: int) -> bool:
    """The verdict before the refit test: a baseline whose bootstrap CI excludes 0.5, its p-value from shuffles
    over its fixed scores, within the CI of the method (or above it)."""
    results = metrics.evaluate(labels, columns, resamples=resamples, seed=seed, baselines=BLIND_COLUMNS)
    name, b = max(((n, r) for n, r in results.items() if n in BLIND_COLUMNS), key=lambda item: item[1].auroc)
    m = results["chance"]
    return b.auroc_ci[0] > 0.5 and (b.auroc >= m.auroc_ci[0] or b.auroc_ci[1] >= m.auroc)


def one_run(texts: list[str], labels: np.ndarray, seed: int, resamples: int) -> dict:
    noise = np.random.default_rng(10_000 + seed).normal(size=len(labels))
    started = time.perf_counter()
    assessed = assess(texts, labels, {"chance": noise}, resamples=resamples, seed=seed)
    seconds = time.perf_counter() - started
    model_free = next(v for v in assessed.verdicts if v.key == "model_free")
    aurocs = {n: assessed.results[n].auroc for n in BLIND_COLUMNS}
    detectable = model_free.details["per_column"]
    return {
        "warning": model_free.warning,
        "leak": bool(model_free.details["leaking"]),
        "earlier_warning": earlier_rule(labels, assessed.columns, resamples, seed),
        "min_detectable_auroc": model_free.min_detectable_auroc,
        "min_detectable_auroc_per_column": detectable,
        # Some baseline separates this split beyond what its test would detect 80% of the time.
        "beyond_detectable": any(detectable[n] is not None and aurocs[n] > detectable[n] for n in BLIND_COLUMNS),
        "p_values": {n: assessed.results[n].significance.permutation_p for n in BLIND_COLUMNS},
        "aurocs": aurocs,
        "shuffles": {n: t.permutations for n, t in assessed.blind.tests.items()},
        "seconds": seconds,
    }


def draw(pool: list[str], size: int, seed: int) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(pool), 2 * size, replace=False)
    labels = rng.permutation(np.r_[np.ones(size), np.zeros(size)].astype(np.int64))
    return [pool[i] for i in chosen], labels


def summarise(runs: list[dict], key: str) -> dict:
    hits = sum(run[key] for run in runs)
    return {
        "count": hits,
        "runs": len(runs),
        "rate": hits / len(runs),
        "clopper_pearson_95": clopper_pearson(hits, len(runs)),
    }


def plot(path, sizes: list[int], null: dict, planted: dict) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = np.arange(len(sizes))
    for offset, (key, label, colour) in enumerate(
        (
            ("earlier_warning", "earlier rule: WARNING", "tab:grey"),
            ("warning", "refit test: WARNING", "tab:red"),
            ("leak", "refit test: any leak verdict", "tab:orange"),
        )
    ):
        rates = [null[str(s)][key]["rate"] for s in sizes]
        cis = np.array([null[str(s)][key]["clopper_pearson_95"] for s in sizes])
        errors = [np.array(rates) - cis[:, 0], cis[:, 1] - np.array(rates)]
        left.bar(x + (offset - 1) * 0.27, rates, 0.27, yerr=errors, capsize=3, label=label, color=colour)
    left.axhline(0.05, color="black", linestyle=":", linewidth=1, label="5%")
    left.set_xticks(x, [f"{s} + {s}" for s in sizes])
    left.set_ylabel("share of random splits")
    left.set_title("false leak alarms on i.i.d. splits (Clopper-Pearson 95% CI)")
    left.legend(fontsize=8)
    warned = [planted[str(s)]["warning"]["rate"] for s in sizes]
    detectable = [np.median(planted[str(s)]["min_detectable_auroc"]) for s in sizes]
    right.bar(x - 0.2, warned, 0.4, label="planted leak: share that warns", color="tab:red")
    right.bar(x + 0.2, detectable, 0.4, label="its minimum detectable AUROC (median)", color="tab:blue")
    right.set_xticks(x, [f"{s} + {s}" for s in sizes])
    right.set_ylim(0, 1.05)
    right.set_title("planted leak (AUROC 1 through ' 2026')")
    right.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def main() -> None:
    from common import RESULTS, machine, pile_texts

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="6,20,100", help="members (= non-members) per split, comma-separated")
    parser.add_argument("--shuffles", type=int, default=200)
    parser.add_argument("--planted", type=int, default=10)
    parser.add_argument("--weak", type=int, default=50, help="draws of 100 + 100 rows of the weak-leak fixture")
    parser.add_argument("--bootstrap", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pool = pile_texts("wikipedia_en", n=LAST)[FIRST:LAST]
    null, planted = {}, {}
    for size in sizes:
        runs = []
        for seed in range(args.shuffles):
            runs.append(one_run(*draw(pool, size, seed), seed=seed, resamples=args.bootstrap))
            if (seed + 1) % 20 == 0:
                print(
                    f"{size} + {size}: {seed + 1} splits, WARNING {sum(r['warning'] for r in runs)}, "
                    f"leak {sum(r['leak'] for r in runs)}, earlier rule {sum(r['earlier_warning'] for r in runs)}",
                    flush=True,
                )
        null[str(size)] = {
            **{key: summarise(runs, key) for key in ("warning", "leak", "earlier_warning")},
            "p_below_0.05": {n: float(np.mean([r["p_values"][n] < 0.05 for r in runs])) for n in BLIND_COLUMNS},
            "min_detectable_auroc_median": float(np.median([r["min_detectable_auroc"] or 1.0 for r in runs])),
            "seconds_median": float(np.median([r["seconds"] for r in runs])),
            "runs": runs,
        }
        planted_runs = []
        for seed in range(args.planted):
            texts, labels = draw(pool, size, 50_000 + seed)
            texts = [t + PLANTED if label else t for t, label in zip(texts, labels)]
            planted_runs.append(one_run(texts, labels, seed=seed, resamples=args.bootstrap))
        beyond = [run for run in planted_runs if run["beyond_detectable"]]
        planted[str(size)] = {
            "warning": summarise(planted_runs, "warning"),
            "warning_where_beyond_detectable": summarise(beyond, "warning") if beyond else None,
            "min_detectable_auroc": [r["min_detectable_auroc"] or 1.0 for r in planted_runs],
            "runs": planted_runs,
        }
        print(
            f"{size} + {size}: false WARNING {null[str(size)]['warning']['rate']:.3f} "
            f"{null[str(size)]['warning']['clopper_pearson_95']}, any leak {null[str(size)]['leak']['rate']:.3f}, "
            f"earlier rule {null[str(size)]['earlier_warning']['rate']:.3f}; planted warns "
            f"{planted[str(size)]['warning']['rate']:.2f} (minimum detectable AUROC "
            f"{np.median(planted[str(size)]['min_detectable_auroc']):.2f}); where a baseline is beyond its figure, "
            f"{sum(r['warning'] for r in beyond)} of {len(beyond)} warn",
            flush=True,
        )
    weak = {}
    if args.weak:
        texts, labels = weak_leak_fixture(pile_texts)
        whole = blind_scores(texts, labels)
        weak_runs = [
            one_run(*weak_sample(texts, labels, seed), seed=seed, resamples=args.bootstrap) for seed in range(args.weak)
        ]
        weak = {
            "fixture_auroc": {name: metrics.auroc(labels, values) for name, values in whole.items()},
            "leak": summarise(weak_runs, "leak"),
            "min_detectable_auroc_median": float(np.median([r["min_detectable_auroc"] or 1.0 for r in weak_runs])),
            "runs": weak_runs,
        }
        print(
            f"weak leak: blind_bow AUROC {weak['fixture_auroc']['blind_bow']:.3f} on all {len(labels):,} rows; "
            f"{WEAK_SAMPLE} + {WEAK_SAMPLE} samples show it in {weak['leak']['rate']:.2f} of {args.weak} "
            f"(minimum detectable AUROC, median {weak['min_detectable_auroc_median']:.3f})",
            flush=True,
        )
    RESULTS.mkdir(exist_ok=True)
    stem = f"blind-null-{os.cpu_count()}core"
    payload = {
        "benchmark": "blind_null",
        "machine": machine(),
        "args": vars(args),
        "null": null,
        "planted": planted,
        "weak": weak,
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(payload, indent=1) + "\n")
    plot(RESULTS / f"{stem}.png", sizes, null, planted)
    print(f"wrote {RESULTS / stem}.json and .png")


if __name__ == "__main__":
    main()
