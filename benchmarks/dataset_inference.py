"""Dataset inference on the controlled experiment: does the p-value fall with the number of texts for a
planted set, and stay large for a set that was never trained on?

    python benchmarks/dataset_inference.py [--texts 128] [--lr 1e-4] [--epochs 1] [--neighbor-count 3]

The shared pile_test documents (four subsets interleaved) are split i.i.d. into members and
non-members and the built-in SmolLM2-135M is fine-tuned on the members (mildly, as the
contamination benchmark's lr 1e-4 / 1 epoch run), then every text is scored with dataset
inference's features (loss, zlib, Min-K% and Min-K%++ over k, lowercase, word-drop neighbours, and
ref: the untouched model). Dataset inference runs on the planted members as the suspect set against
the held-out non-members, and, as the false-positive check, on two halves of the non-members; once
with every feature, and once without ``ref`` (the untouched model is an oracle reference an auditor
rarely has). ``--reuse`` analyses the experiment already in ``--reports`` again without re-running it.
Writes ``results/dataset-inference-<cores>core.{json,png}`` (the plot: every feature).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from common import RESULTS, machine
from contamination import interleaved_corpus

from mia_fast.api import NeighborSettings, ScoringConfig
from mia_fast.evaluation.assessment import BlindSettings
from mia_fast.evaluation.dataset_inference import dataset_inference, plot_p_values
from mia_fast.evaluation.experiments import ExperimentDesign, FineTuning, run_experiment
from mia_fast.generation.neighbors import WordDropNeighbors
from mia_fast.methods import resolve_methods
from mia_fast.pipeline.models import load_model

FEATURES = ["loss", "zlib", "mink", "minkpp", "lowercase", "neighbor", "ref"]
KS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=128, help="texts, half of them members (default 128)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--neighbor-count", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="analyse the experiment already in --reports again")
    parser.add_argument("--reports", type=Path, default=Path(tempfile.gettempdir()) / "mia-fast-dataset-inference")
    args = parser.parse_args()

    if not args.reuse:
        loaded = load_model(device="cpu", dtype="fp32")
        run_experiment(
            loaded,
            interleaved_corpus(max(64, args.texts)),
            args.reports,
            ExperimentDesign(
                tuning=FineTuning(args.epochs, args.lr, 8, args.max_tokens, args.seed),
                texts=args.texts,
                bootstrap=200,
                blind=BlindSettings(enabled=False),
            ),
            ScoringConfig(
                methods=FEATURES,
                k=KS,
                settings=[NeighborSettings(WordDropNeighbors(args.neighbor_count, seed=args.seed))],
            ),
            corpus_name="pile_test (4 subsets)",
        )
    features = [c for r in resolve_methods(FEATURES, KS) for c in r.columns]
    rows = [json.loads(line) for line in (args.reports / "scores.jsonl").read_text().splitlines()]
    labels = np.array([row["label"] for row in rows])
    columns = {f: np.array([row[f] for row in rows], dtype=np.float64) for f in features}
    members = {f: v[labels == 1] for f, v in columns.items()}
    nonmembers = {f: v[labels == 0] for f, v in columns.items()}
    payload = json.loads((args.reports / "metrics.json").read_text())
    variants = {}
    for variant, used in (("every feature", features), ("without ref", [f for f in features if f != "ref"])):
        result = dataset_inference(members, nonmembers, used, seed=args.seed)
        variants[variant] = result
        print(f"{variant}: {result.summary()}")
        for name, test in (
            ("planted vs held-out", result.test),
            ("non-member half vs half", result.false_positive_check),
        ):
            print(f"  {name}: " + "  ".join(f"{n}: {p:.3g}" for n, p in zip(test.sizes, test.p_values)))
    best = {
        name: payload["methods"][name]
        for name in (
            "ref",
            max((n for n in payload["methods"] if n != "ref"), key=lambda n: payload["methods"][n]["auroc"]),
        )
    }
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"dataset-inference-{os.cpu_count()}core"
    meta = payload["meta"]
    settings = {
        "texts": meta["texts"],
        "members": int(labels.sum()),
        "nonmembers": int(len(labels) - labels.sum()),
        "learning_rate": meta["learning_rate"],
        "epochs": meta["epochs"],
        "max_tokens": meta["max_tokens"],
        "neighbors": meta["neighbors"],
        "seed": meta["seed"],
        "first_loss": meta["first_loss"],
        "last_loss": meta["last_loss"],
        "features": features,
        "single_feature_auroc": {name: {"auroc": m["auroc"], "auroc_ci": m["auroc_ci"]} for name, m in best.items()},
    }
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "benchmark": "dataset_inference",
                "machine": machine(),
                "settings": settings,
                "variants": {name: r.to_dict() for name, r in variants.items()},
            },
            indent=2,
        )
        + "\n"
    )
    plot_p_values(stem.with_suffix(".png"), variants["every feature"])
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
