"""What the model-free baselines cost an eval, and what they find on a leaky and on an i.i.d. split.

    python benchmarks/blind.py [--texts 10000] [--words 100] [--rounds 3]

The shared pile_test documents (four subsets) are cut into passages of ``--words`` words until there
are ``--texts`` of them. Two splits of the same passages: i.i.d. (labels drawn at random: the
baselines must stay at chance) and leaky (members are the Wikipedia and Pile-CC passages, non-members
the PubMed and StackExchange ones: they must find it). Times ``blind_baselines`` (the three baselines,
5-fold, and the telltale n-grams) as the median of ``--rounds``, without their permutation test; then once with it
(each shuffle refitted, the most shuffles by the sample's size: what an eval adds), with each baseline's p-value
and the shuffles it drew. Writes ``results/blind-<cores>core.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from itertools import zip_longest

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import blind_baselines

SUBSETS = ("wikipedia_en", "pile_cc", "pubmed_abstracts", "stackexchange")


def passages(count: int, words: int) -> tuple[list[str], np.ndarray]:
    """Up to ``count`` passages of ``words`` words, taken from the subsets in turn (then from those that have
    more); and each one's subset index."""
    cut: list[tuple[str, int]] = []
    pools = [
        [
            " ".join(doc.split()[i : i + words])
            for doc in pile_texts(name, n=5000, max_words=None)
            for i in range(0, len(doc.split()) - words + 1, words)
        ]
        for name in SUBSETS
    ]
    for group in zip_longest(*pools):
        cut.extend((text, subset) for subset, text in enumerate(group) if text is not None)
        if len(cut) >= count:
            break
    texts, subsets = zip(*cut[:count])
    return list(texts), np.array(subsets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts, subsets = passages(args.texts, args.words)
    splits = {
        "iid": np.random.default_rng(0).permutation(np.arange(len(texts)) % 2),
        "leaky": (subsets < 2).astype(int),
    }
    results = {}
    for name, labels in splits.items():
        seconds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            found = blind_baselines(texts, labels, permutations=0)
            seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        tested = blind_baselines(texts, labels, progress=True)
        tested_seconds = time.perf_counter() - started
        results[name] = {
            "seconds_median": float(np.median(seconds)),
            "seconds": seconds,
            "auroc": {column: metrics.auroc(labels, values) for column, values in found.scores.items()},
            "telltales": [asdict(t) for t in tested.telltales],
            "with_refit_test": {
                "seconds": tested_seconds,
                "p_value": {column: test.p_value for column, test in tested.tests.items()},
                "shuffles": {column: test.permutations for column, test in tested.tests.items()},
                "refits": {column: len(test.null_aurocs) for column, test in tested.tests.items()},
                "most": next(iter(tested.tests.values())).most,
            },
        }
        print(
            f"{name}: {len(texts)} texts of {args.words} words, {np.median(seconds):.1f} s (median of {args.rounds}), "
            f"{tested_seconds:.1f} s with the refit test; "
            + ", ".join(
                f"{c} AUROC {a:.3f} p {tested.tests[c].p_value:.3g} ({tested.tests[c].permutations} shuffles)"
                for c, a in results[name]["auroc"].items()
            ),
            flush=True,
        )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"blind-{os.cpu_count()}core.json"
    path.write_text(
        json.dumps(
            {"benchmark": "blind", "machine": machine(), "texts": len(texts), "words": args.words, "results": results},
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
