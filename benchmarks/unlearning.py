"""Does the unlearning audit find the texts a model failed to forget? A controlled case on real text.

    python benchmarks/unlearning.py [--method mink_0.2] [--planted 16] [--never-seen 16]
        [--ascent-lr 5e-5] [--ascent-steps 4]

Passages of the shared pile_test wikipedia_en, each cut to 128 tokens: ``--planted`` of them are
planted into the built-in SmolLM2-135M by fine-tuning as ``mia-fast demo`` does (3 epochs, lr 1e-4,
batch 8): model B. Gradient ascent on half of them, the planted-unlearned passages (every step sees
all of them), "unlearns" those: model C; the other half is planted-kept. Both are saved
and ``mia-fast audit-unlearning`` (ratio rule, its default ratio) audits all three groups. It should flag
the planted-kept passages and not the planted-unlearned ones; the never-seen passages keep their score,
so the rule flags them too: the audit is meant for texts that were supposed to be unlearned. Writes
``results/unlearning-<cores>core.json`` and the audit's scatter plot beside it (``.png``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast.api import Detector
from mia_fast.cli.main import main as mia_fast
from mia_fast.evaluation.corpus import prepare_texts
from mia_fast.evaluation.experiments import FineTuning
from mia_fast.evaluation.unlearning import DEFAULT_RATIO
from mia_fast.generation.finetune import fine_tune
from mia_fast.pipeline.models import load_model

GROUPS = ("planted-kept", "planted-unlearned", "never-seen")


def save(loaded, directory: Path) -> Path:
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


def precision_recall(flags: list[bool], truth: list[bool]) -> dict[str, float]:
    hits = sum(f and t for f, t in zip(flags, truth))
    return {
        "precision": hits / max(sum(flags), 1),
        "recall": hits / max(sum(truth), 1),
        "flagged": sum(flags),
        "true": sum(truth),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="mink_0.2", help="the audited score column (default mink_0.2)")
    parser.add_argument(
        "--planted", type=int, default=16, help="passages planted, half of them then unlearned (default 16)"
    )
    parser.add_argument(
        "--never-seen", type=int, default=16, help="passages never trained on, audited too (default 16)"
    )
    parser.add_argument("--ascent-lr", type=float, default=5e-5)
    parser.add_argument("--ascent-steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, default=Path(tempfile.gettempdir()) / "mia-fast-unlearning")
    args = parser.parse_args()
    tuning = FineTuning(seed=args.seed)

    model = load_model(device="cpu", dtype="fp32")
    count = args.planted + args.never_seen
    texts = prepare_texts(
        pile_texts("wikipedia_en", n=2 * count, max_words=None), model.tokenizer, count, tuning.max_tokens, args.seed
    )
    sizes = dict(zip(GROUPS, (args.planted // 2, args.planted - args.planted // 2, args.never_seen)))
    groups = [name for name, size in sizes.items() for _ in range(size)]
    kept, unlearned = texts[: sizes["planted-kept"]], texts[sizes["planted-kept"] : args.planted]
    detector = Detector(model)  # the model is changed in place: it scores B, then C

    started = time.perf_counter()
    planting = fine_tune(model, kept + unlearned, tuning)
    seconds = {"plant": time.perf_counter() - started}
    loss_b = detector.score(texts, methods=["loss"])["loss"]
    with tempfile.TemporaryDirectory() as models:
        before = save(model, Path(models) / "B")
        started = time.perf_counter()
        ascending = replace(tuning, epochs=args.ascent_steps, learning_rate=args.ascent_lr, batch_size=len(unlearned))
        ascent = fine_tune(model, unlearned, ascending, ascent=True)
        seconds["unlearn"] = time.perf_counter() - started
        loss_c = detector.score(texts, methods=["loss"])["loss"]
        after = save(model, Path(models) / "C")
        data = Path(models) / "audited.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "text": t, "group": g}) + "\n" for i, (t, g) in enumerate(zip(texts, groups)))
        )
        started = time.perf_counter()
        code = mia_fast(
            [
                "audit-unlearning",
                str(data),
                "--before",
                str(before),
                "--after",
                str(after),
                "--method",
                args.method,
                "--group-field",
                "group",
                "--report",
                str(args.report),
                "--overwrite",
                "--device",
                "cpu",
                "--dtype",
                "fp32",
            ]
        )
        seconds["audit"] = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"the audit failed (exit {code})")

    rows = [json.loads(line) for line in (args.report / "audit.jsonl").read_text().splitlines()]
    flags = [r["flag"] for r in rows]
    kept_share = np.array([r["before"] / r["after"] for r in rows])
    by_group = {}
    for name in GROUPS:
        chosen = np.array(groups) == name
        by_group[name] = {
            "texts": int(chosen.sum()),
            "flagged": int(sum(f for f, c in zip(flags, chosen) if c)),
            "mean_loss_B": float(-loss_b[chosen].mean()),
            "mean_loss_C": float(-loss_c[chosen].mean()),
            "kept_share_min": float(kept_share[chosen].min()),
            "kept_share_max": float(kept_share[chosen].max()),
        }
    planted = [g != "never-seen" for g in groups]
    truth = [g == "planted-kept" for g in groups]
    scores = {
        "planted": precision_recall([f for f, p in zip(flags, planted) if p], [t for t, p in zip(truth, planted) if p]),
        "all": precision_recall(flags, truth),
    }
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"unlearning-{os.cpu_count()}core"
    settings = {
        "model": model.name,
        "corpus": "pile_test wikipedia_en",
        "texts": sizes,
        "method": args.method,
        "ratio": DEFAULT_RATIO,
        "fine_tuning": asdict(tuning),
        "ascent_lr": args.ascent_lr,
        "ascent_steps": args.ascent_steps,
        "ascent_batch": len(unlearned),
        "seed": args.seed,
    }
    result = {
        "benchmark": "unlearning",
        "machine": machine(),
        "settings": settings,
        "planting_losses": planting,
        "ascent_losses": ascent,
        "groups": by_group,
        "flags_vs_truth": scores,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    shutil.copyfile(args.report / "before_after.png", stem.with_suffix(".png"))

    print(
        f"step losses (each before its update): planting (B) {' '.join(f'{x:.3f}' for x in planting)}; "
        f"gradient ascent (C) {' '.join(f'{x:.3f}' for x in ascent)}"
    )
    print(f"{'group':<18} {'texts':>5} {'loss B':>7} {'loss C':>7} {'kept share':>12} {'flagged':>8}")
    for name, g in by_group.items():
        print(
            f"{name:<18} {g['texts']:>5} {g['mean_loss_B']:>7.3f} {g['mean_loss_C']:>7.3f} "
            f"{g['kept_share_min']:>5.2f}-{g['kept_share_max']:<5.2f} {g['flagged']:>8}"
        )
    for name, s in scores.items():
        print(f"flags vs truth (planted-kept), {name} texts: precision {s['precision']:.3f}, recall {s['recall']:.3f}")
    print(f"wrote {stem}.json and {stem}.png")


if __name__ == "__main__":
    main()
