"""Min-K%++ through a server: how close ``minkpp_top{K}`` comes to exact ``minkpp``, on the demo's planted members.

    python benchmarks/minkpp_top_fidelity.py [--texts 64] [--k 0.1,0.2,0.5,1.0] [--bootstrap 1000] [--no-untouched]

``mia-fast demo``'s experiment, unchanged (``run_experiment``: stdlib-docstring passages cut to 128 tokens, half
of them members fine-tuned into the built-in SmolLM2-135M in fp32 for 3 epochs at lr 1e-4, the other half held
out), scores every text with ``minkpp`` and ``minkpp_top5/10/20`` in one ``Detector.score`` call. The model runs
here, so the top K log-probs come from its full logits, exactly what a server would return: the two columns
differ only by the approximation (the mass the top K leave spread evenly over the rest of the vocabulary).

Per K and k: Spearman's rank correlation over the texts between ``minkpp_k`` and ``minkpp_topK_k``, the AUROC of
each with its 95% bootstrap CI, and the AUROC difference with a CI from the same paired resamples
(``mia_fast.evaluation.metrics``). The untouched model scores the same texts as a second group (no members
planted: its AUROCs sit near 0.5, the correlations still say how well the ranking is kept). Writes
``results/minkpp-top-fidelity.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

TOPS = (5, 10, 20)
KS = (0.1, 0.2, 0.5, 1.0)
NAME = "minkpp-top-fidelity"


def midranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``values``, ties sharing their mean rank."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ordered)) + 1]
    ends = np.r_[starts[1:], len(values)]
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on mid-ranks) over the rows where both are finite."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    kept = np.isfinite(a) & np.isfinite(b)
    ra, rb = midranks(a[kept]), midranks(b[kept])
    ra, rb = ra - ra.mean(), rb - rb.mean()
    scale = np.sqrt((ra**2).sum() * (rb**2).sum())
    return float((ra * rb).sum() / scale) if scale > 0 else float("nan")


def column(method: str, k: float) -> str:
    """The name ``Detector.score`` gives a k-method's column (``minkpp_0.2``)."""
    return f"{method}_{k}"


def fidelity(
    labels: np.ndarray,
    scores: Mapping[str, np.ndarray],
    ks: Sequence[float],
    tops: Sequence[int] = TOPS,
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict]:
    """One row per (K, k): Spearman between exact and approximate scores, the AUROC of each with its CI, and
    their difference (approximate - exact) with a CI from the same paired bootstrap resamples."""
    from mia_fast.evaluation import metrics

    labels = np.asarray(labels)
    names = [column("minkpp", k) for k in ks] + [column(f"minkpp_top{top}", k) for top in tops for k in ks]
    chosen = {name: np.asarray(scores[name], dtype=np.float64) for name in names}
    results = metrics.evaluate(labels, chosen, resamples=resamples, seed=seed)
    # evaluate() resamples the rows it keeps (finite everywhere) with this seed: the same draws, here kept.
    finite = np.logical_and.reduce([np.isfinite(s) for s in chosen.values()])
    draws = metrics.bootstrap_auroc(labels[finite], {n: s[finite] for n, s in chosen.items()}, resamples, seed)
    rows = []
    for top in tops:
        for k in ks:
            exact, approx = column("minkpp", k), column(f"minkpp_top{top}", k)
            rows.append(
                {
                    "top": top,
                    "k": k,
                    "spearman": spearman(chosen[exact], chosen[approx]),
                    "auroc_exact": results[exact].auroc,
                    "auroc_exact_ci": list(results[exact].auroc_ci),
                    "auroc_top": results[approx].auroc,
                    "auroc_top_ci": list(results[approx].auroc_ci),
                    "auroc_diff": results[approx].auroc - results[exact].auroc,
                    "auroc_diff_ci": list(metrics.confidence_interval(draws[approx] - draws[exact])),
                }
            )
    return rows


def table(groups: Mapping[str, list[dict]]) -> str:
    lines = [
        "| model | K | k | Spearman vs minkpp | AUROC minkpp [95% CI] | AUROC minkpp_topK [95% CI] "
        "| difference [paired 95% CI] |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for group, rows in groups.items():
        for r in rows:
            lines.append(
                f"| {group} | {r['top']} | {r['k']} | {r['spearman']:.4f} | "
                f"{r['auroc_exact']:.3f} [{r['auroc_exact_ci'][0]:.3f}, {r['auroc_exact_ci'][1]:.3f}] | "
                f"{r['auroc_top']:.3f} [{r['auroc_top_ci'][0]:.3f}, {r['auroc_top_ci'][1]:.3f}] | "
                f"{r['auroc_diff']:+.3f} [{r['auroc_diff_ci'][0]:+.3f}, {r['auroc_diff_ci'][1]:+.3f}] |"
            )
    return "\n".join(lines)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def read_scores(path: Path, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Columns of the experiment's ``scores.jsonl`` (one row per text, in ``Experiment.texts`` order)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda row: row["id"])
    return {name: np.array([row[name] for row in rows], dtype=np.float64) for name in names}


def main() -> None:
    from mia_fast.cli.options import fractions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=64, help="texts drawn, half of them members (default 64)")
    parser.add_argument("--k", type=fractions, default=list(KS), help="fractions (default 0.1,0.2,0.5,1.0)")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--no-untouched", dest="untouched", action="store_false", help="skip the untouched model")
    parser.add_argument("--name", default=NAME)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import RESULTS, machine

    from mia_fast import Detector, ModelConfig
    from mia_fast.api import ScoringConfig
    from mia_fast.evaluation.assessment import BlindSettings
    from mia_fast.evaluation.corpus import stdlib_corpus
    from mia_fast.evaluation.experiments import ExperimentDesign, FineTuning, run_experiment
    from mia_fast.pipeline.models import LoadedModel, load_model

    loads = {"start": load_average()}
    started = time.perf_counter()
    methods = ("minkpp", *(f"minkpp_top{top}" for top in TOPS))
    ks = tuple(args.k)
    names = [column(m, k) for m in methods for k in ks]
    loaded = load_model(device="cpu", dtype="fp32")  # what `mia-fast demo` loads
    untouched = (
        LoadedModel(
            copy.deepcopy(loaded.model), loaded.tokenizer, f"{loaded.name} (untouched)", loaded.device, loaded.dtype
        )
        if args.untouched
        else None
    )
    design = ExperimentDesign(
        tuning=FineTuning(), texts=args.texts, bootstrap=args.bootstrap, blind=BlindSettings(enabled=False)
    )
    with tempfile.TemporaryDirectory(prefix="minkpp-top-") as report:
        experiment, _ = run_experiment(
            loaded, stdlib_corpus(), report, design, ScoringConfig(methods=methods, k=ks), "stdlib docstrings"
        )
        scores = {"fine-tuned": read_scores(Path(report) / "scores.jsonl", names)}
    print(
        f"fine-tuned on {len(experiment.members)} members: loss {experiment.losses[0]:.3f} -> "
        f"{experiment.losses[-1]:.3f}; scored in {experiment.seconds['score']:.1f} s",
        flush=True,
    )
    if untouched is not None:
        scored = Detector(ModelConfig(untouched)).score(experiment.texts, methods, ks)
        scores["untouched"] = {name: np.asarray(scored[name], dtype=np.float64) for name in names}
    groups = {
        group: fidelity(experiment.labels, columns, ks, TOPS, args.bootstrap, design.tuning.seed)
        for group, columns in scores.items()
    }
    loads["end"] = load_average()
    result = {
        "benchmark": NAME,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", *sys.argv]),
        "load_average": loads,
        "seconds": time.perf_counter() - started,
        "settings": {
            "model": loaded.name,
            "dtype": "fp32",
            "corpus": "Python standard library docstrings",
            **experiment.settings,
            "first_loss": experiment.losses[0],
            "last_loss": experiment.losses[-1],
            "k": list(ks),
            "tops": list(TOPS),
            "bootstrap": args.bootstrap,
        },
        "groups": groups,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(groups))
    print(f"load average {loads['start']} -> {loads['end']}; wrote {path}")


if __name__ == "__main__":
    main()
