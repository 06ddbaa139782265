"""Parity of mia-fast's scores with the public Min-K%++ loop, and of both with an fp64 ground truth.

The first 100 texts of pile_test/wikipedia_en cut to 100 words, built-in model, fp32, CPU,
--no-prepend-start. Writes ``results/parity-default-model.json``.

    python benchmarks/parity.py
"""

from __future__ import annotations

import json

import numpy as np
from common import RESULTS, machine, pile_texts
from reference_loop import public_loop_scores

from mia_fast import Detector, ModelConfig

KS = [0.1, 0.2, 0.5, 1.0]


def max_relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / np.abs(b)))


def main() -> None:
    texts = pile_texts("wikipedia_en", n=100, max_words=100)
    detector = Detector(ModelConfig(prepend_start=False, device="cpu", dtype="fp32"))
    loaded = detector.target.loaded
    ours = detector.score(texts, methods=["loss", "zlib", "mink", "minkpp"], k=KS)
    public = public_loop_scores(loaded.model, loaded.tokenizer, texts, KS)
    exact = public_loop_scores(loaded.model, loaded.tokenizer, texts, KS, upcast_logits=True)
    rows = {}
    for column in ours:
        got, theirs, truth = ours[column], np.asarray(public[column]), np.asarray(exact[column])
        rows[column] = {
            "max_rel_vs_public": max_relative(got, theirs),
            "max_abs_vs_public": float(np.max(np.abs(got - theirs))),
            "max_abs_ours_vs_fp64": float(np.max(np.abs(got - truth))),
            "max_abs_public_vs_fp64": float(np.max(np.abs(theirs - truth))),
        }
        print(f"{column:<12} " + "  ".join(f"{k} {v:.2e}" for k, v in rows[column].items()))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "parity-default-model.json"
    path.write_text(
        json.dumps({"machine": machine(), "model": loaded.name, "texts": len(texts), "columns": rows}, indent=2) + "\n"
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
