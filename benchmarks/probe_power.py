"""The probe, settled with power: does the last token's hidden state carry membership at all, does the proxy learn
it, and does the probe find it at any layer or proxy learning rate?

For each seed, on one pile_test domain (texts cut to 128 tokens, split i.i.d.): fine-tune the built-in model on the
members (3 epochs at lr 1e-4, as the contamination experiment and ``benchmarks/probe.py`` do), then

- **oracle**: a probe of the same kind (bias-free logistic regression per layer, standardised, as
  ``mia_fast.evaluation.probe_training.fit_probes``) trained on the *target's own* activations of the evaluated texts
  with the true labels, scored out of fold (k-fold): an upper bound for any probe. Near 0.5, the state carries no
  membership and no proxy can help.
- **the probe**, trained with ``train_probe`` on a disjoint probe set (half of it its proxy's members) once per
  proxy learning rate, its layer picked on a dev set: the evaluation AUROC of *every* layer's probe at every
  learning rate, not only the one picked, with the one picked marked.
- **proxy self-check**: the probe's AUROC on its own proxy's members and non-members held out of the probe's fit
  (k-fold on the proxy's activations), and the proxy's mean loss on both groups against the untouched target's.

Loss and Min-K%++ on the same evaluated texts give the scale. Writes ``results/probe-power-<cores>core.json`` and
``results/probe-power.png`` and prints the tables for ``benchmarks/README.md``; seeds already in the results file
(same settings) are kept, not run again.

    python benchmarks/probe_power.py [--seeds 0,1,2] [--domain wikipedia_en] [--members 256] [--dev 64]
        [--probe-texts 200] [--lrs 3e-4,1e-3,3e-3,1e-2] [--folds 5] [--tables-only]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

import numpy as np
from common import RESULTS, machine, pile_texts

from mia_fast import Detector, load_model
from mia_fast.data import Dataset
from mia_fast.engines.passes import HiddenStatesReadout
from mia_fast.evaluation import metrics
from mia_fast.evaluation.corpus import prepare_texts, split_members
from mia_fast.evaluation.figures import pyplot, save_figure
from mia_fast.evaluation.probe_training import ProbeTraining, fit_probes, train_probe
from mia_fast.generation.finetune import FineTuning, TrainingDiverged, fine_tune
from mia_fast.methods.probe import ProbePrompt, standardise
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.pipeline.models import LoadedModel

TARGET_TUNING = dict(epochs=3, learning_rate=1e-4, batch_size=8, max_tokens=128)


def activations(loaded: LoadedModel, texts: list[str]) -> np.ndarray:
    """[layers, texts, hidden] float64: every decoder layer's output at the last token of each prompted text."""
    prompt = ProbePrompt()
    found = StatsEngine(loaded, backend="torch").hidden_states([prompt(t) for t in texts], HiddenStatesReadout())
    return found.transpose(1, 0, 2).astype(np.float64)


def out_of_fold_aurocs(features: np.ndarray, labels: np.ndarray, folds: int, seed: int) -> list[float]:
    """Each layer's probe trained on k-1 folds (standardised by their statistics, which the held-out fold is
    standardised by too) and scored on the held-out one: the AUROC of the pooled out-of-fold scores, per layer."""
    from sklearn.model_selection import StratifiedKFold

    scores = np.empty((features.shape[0], len(labels)))
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train, held_out in splitter.split(np.zeros(len(labels)), labels):
        fitted = features[:, train]
        mean, std = fitted.mean(axis=1, keepdims=True), fitted.std(axis=1, ddof=1, keepdims=True)
        weights, _ = fit_probes(standardise(fitted), labels[train], ProbeTraining(seed=seed))
        scores[:, held_out] = np.einsum("lnh,lh->ln", standardise(features[:, held_out], mean, std), weights)
    return [metrics.auroc(labels, layer) for layer in scores]


def mean_loss(loaded: LoadedModel, texts: list[str]) -> float:
    """Mean per-token NLL of the prompted texts (the proxy is fine-tuned on them prompted)."""
    prompt = ProbePrompt()
    return float(-np.mean(Detector(loaded).score([prompt(t) for t in texts], methods=["loss"])["loss"]))


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    started = time.perf_counter()
    loaded = load_model(device="cpu", dtype="fp32")
    untouched = copy.deepcopy(loaded.model)
    corpus = pile_texts(args.domain, n=1000, max_words=None)
    total = 2 * (args.members + args.dev) + args.probe_texts
    drawn = prepare_texts(corpus, loaded.tokenizer, total, 128, seed)
    members, nonmembers = split_members(drawn[: 2 * (args.members + args.dev)], seed)
    dev = Dataset(members[: args.dev] + nonmembers[: args.dev], None, [1] * args.dev + [0] * args.dev)
    evaluated = members[args.dev :] + nonmembers[args.dev :]
    labels = np.r_[np.ones(args.members, np.int8), np.zeros(args.members, np.int8)]
    proxy_members, proxy_nonmembers = split_members(drawn[2 * (args.members + args.dev) :], seed + 7)
    probe_train = Dataset(
        proxy_members + proxy_nonmembers, None, [1] * len(proxy_members) + [0] * len(proxy_nonmembers)
    )
    probe_labels = np.asarray(probe_train.labels, dtype=np.int8)

    tuned = time.perf_counter()
    target_losses = fine_tune(loaded, members, FineTuning(**TARGET_TUNING, seed=seed))
    seconds = {"target_fine_tune": time.perf_counter() - tuned}
    baselines = Detector(loaded).score(evaluated, methods=["loss", "minkpp"], k=(0.2,))
    scale = {name: metrics.auroc(labels, baselines[name]) for name in ("loss", "minkpp_0.2")}

    step = time.perf_counter()
    evaluated_features = activations(loaded, evaluated)
    oracle = out_of_fold_aurocs(evaluated_features, labels, args.folds, seed)
    seconds["oracle"] = time.perf_counter() - step
    print(f"seed {seed}: loss {scale['loss']:.3f}, oracle best layer {int(np.argmax(oracle))}: {max(oracle):.3f}")

    untouched_target = LoadedModel(untouched, loaded.tokenizer, loaded.name, loaded.device, loaded.dtype)
    untouched_loss = {
        "members": mean_loss(untouched_target, proxy_members),
        "nonmembers": mean_loss(untouched_target, proxy_nonmembers),
    }
    by_lr = {}
    for lr in args.lrs:
        step = time.perf_counter()
        try:
            report = train_probe(loaded, probe_train, dev, ProbeTraining(learning_rate=lr, seed=seed), keep_proxy=True)
        except TrainingDiverged as diverged:  # a finding at this learning rate, not the end of the run
            by_lr[str(lr)] = {"diverged": str(diverged), "proxy_losses": diverged.losses}
            print(f"  proxy lr {lr:g}: {diverged}", flush=True)
            continue
        split = standardise(evaluated_features)
        evaluation = [metrics.auroc(labels, split[layer] @ w) for layer, w in enumerate(report.layer_weights)]
        self_check = out_of_fold_aurocs(activations(report.proxy, probe_train.texts), probe_labels, args.folds, seed)
        proxy_loss = {
            "members": mean_loss(report.proxy, proxy_members),
            "nonmembers": mean_loss(report.proxy, proxy_nonmembers),
        }
        by_lr[str(lr)] = {
            "chosen_layer": report.probe.layer,
            "evaluation_auroc_by_layer": evaluation,
            "dev_auroc_by_layer": report.dev_auroc["split"],
            "self_check_auroc_by_layer": self_check,
            "proxy_losses": report.proxy_losses,
            "proxy_mean_loss": proxy_loss,
            "seconds": time.perf_counter() - step,
        }
        print(
            f"  proxy lr {lr:g}: picked layer {report.probe.layer}, its evaluation AUROC "
            f"{evaluation[report.probe.layer]:.3f} (best layer {max(evaluation):.3f}); self-check best "
            f"{max(self_check):.3f}; proxy loss members {proxy_loss['members']:.3f} non-members "
            f"{proxy_loss['nonmembers']:.3f}",
            flush=True,
        )
    seconds["total"] = time.perf_counter() - started
    return {
        "seed": seed,
        **{key: settings(args)[key] for key in ("evaluated", "dev")},
        "probe_train": {"members": len(proxy_members), "nonmembers": len(proxy_nonmembers)},
        "target_fine_tune": {**TARGET_TUNING, "first_loss": target_losses[0], "last_loss": target_losses[-1]},
        "baseline_auroc": scale,
        "oracle_auroc_by_layer": oracle,
        "untouched_target_mean_loss_on_probe_set": untouched_loss,
        "proxy_lrs": by_lr,
        "seconds": seconds,
    }


def trained(runs: list[dict], lrs: list[str]) -> list[str]:
    """The learning rates whose proxy fine-tuning did not diverge in any run."""
    return [lr for lr in lrs if all("diverged" not in r["proxy_lrs"][lr] for r in runs)]


def plot(runs: list[dict], lrs: list[str], path) -> None:
    lrs = trained(runs, lrs)
    plt = pyplot()
    fig, (evaluation, self_check) = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    layers = np.arange(len(runs[0]["oracle_auroc_by_layer"]))

    def band(ax, key_of, label, **style):
        values = np.array([key_of(run) for run in runs])
        ax.plot(layers, values.mean(axis=0), label=label, **style)
        ax.fill_between(layers, values.min(axis=0), values.max(axis=0), alpha=0.15, color=style.get("color"))

    band(evaluation, lambda r: r["oracle_auroc_by_layer"], "oracle (target, true labels, out of fold)", color="k")
    for lr, colour in zip(lrs, ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")):
        band(
            evaluation,
            lambda r, lr=lr: r["proxy_lrs"][lr]["evaluation_auroc_by_layer"],
            f"probe, proxy lr {lr}",
            color=colour,
        )
        band(
            self_check, lambda r, lr=lr: r["proxy_lrs"][lr]["self_check_auroc_by_layer"], f"proxy lr {lr}", color=colour
        )
    loss = np.mean([run["baseline_auroc"]["loss"] for run in runs])
    evaluation.axhline(loss, color="grey", linestyle="--", label=f"loss ({loss:.2f})")
    evaluation.set_title(f"AUROC on the evaluated texts, by layer (mean of {len(runs)} seeds, band: min-max)")
    self_check.set_title("proxy self-check: the probe on its own proxy's held-out texts")
    for ax in (evaluation, self_check):
        ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("layer")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    evaluation.set_ylabel("AUROC")
    save_figure(fig, path)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---:|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def markdown_tables(runs: list[dict], lrs: list[str]) -> str:
    """Per layer: the oracle and, per proxy lr, the probe's evaluation AUROC (how many seeds picked that layer) and
    its self-check, means over seeds; per seed: the scale, the oracle's best and the probe as picked; the proxy's
    loss on its own members and non-members; then the learning rates whose proxy diverged."""
    kept = trained(runs, lrs)
    diverged = {f"{r['seed']}, lr {lr}": r["proxy_lrs"][lr]["diverged"] for r in runs for lr in lrs if lr not in kept}
    lrs = kept

    def mean(key, layer: int, lr: str | None = None) -> str:
        return f"{np.mean([(r['proxy_lrs'][lr] if lr else r)[key][layer] for r in runs]):.3f}"

    by_layer = []
    for layer in range(len(runs[0]["oracle_auroc_by_layer"])):
        row = [str(layer), mean("oracle_auroc_by_layer", layer)]
        for lr in lrs:
            picked = sum(r["proxy_lrs"][lr]["chosen_layer"] == layer for r in runs)
            row += [
                mean("evaluation_auroc_by_layer", layer, lr) + (f" ({picked}×)" if picked else ""),
                mean("self_check_auroc_by_layer", layer, lr),
            ]
        by_layer.append(row)
    per_seed, losses = [], []
    for r in runs:
        oracle, tuned = r["oracle_auroc_by_layer"], r["proxy_lrs"]
        per_seed.append(
            [str(r["seed"]), f"{r['baseline_auroc']['loss']:.3f}", f"{r['baseline_auroc']['minkpp_0.2']:.3f}"]
            + [f"{max(oracle):.3f} (layer {int(np.argmax(oracle))})"]
            + [
                f"{tuned[lr]['evaluation_auroc_by_layer'][tuned[lr]['chosen_layer']]:.3f} "
                f"(layer {tuned[lr]['chosen_layer']})"
                for lr in lrs
            ]
        )
        pairs = [r["untouched_target_mean_loss_on_probe_set"], *(tuned[lr]["proxy_mean_loss"] for lr in lrs)]
        losses.append([str(r["seed"]), *(f"{p['members']:.3f} / {p['nonmembers']:.3f}" for p in pairs)])
    by_layer_header = ["layer", "oracle", *(f"{kind}, lr {lr}" for lr in lrs for kind in ("probe", "self-check"))]
    seed_header = ["seed", "loss", "minkpp_0.2", "oracle, best layer", *(f"probe as picked, lr {lr}" for lr in lrs)]
    loss_header = ["seed", "untouched: members / non-members", *(f"proxy lr {lr}" for lr in lrs)]
    return "\n".join(
        [*_table(by_layer_header, by_layer), "", *_table(seed_header, per_seed), "", *_table(loss_header, losses)]
        + [f"\nseed {where}: {why}" for where, why in diverged.items() if why]
    )


def settings(args: argparse.Namespace) -> dict:
    """What makes two runs' tables comparable: a finished seed is kept only when these match."""
    return {
        "evaluated": {"members": args.members, "nonmembers": args.members},
        "dev": {"members": args.dev, "nonmembers": args.dev},
        "probe_train": {"members": args.probe_texts // 2, "nonmembers": args.probe_texts // 2},
        "proxy_lrs": sorted(str(lr) for lr in args.lrs),
    }


def finished_runs(path, args: argparse.Namespace) -> list[dict]:
    """The seeds an earlier run of the same settings finished, so that running more seeds adds to them; a results
    file of other settings stops the run rather than being overwritten."""
    if not path.exists():
        return []
    found = json.loads(path.read_text())
    wanted = settings(args)
    for run in found["runs"]:
        held = {key: run[key] for key in ("evaluated", "dev", "probe_train")} | {"proxy_lrs": sorted(run["proxy_lrs"])}
        if (found["domain"], found["folds"], held) != (args.domain, args.folds, wanted):
            raise SystemExit(f"{path} holds seed {run['seed']} of other settings; move it away to start afresh")
    return found["runs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--domain", default="wikipedia_en", help="the one pile_test domain every text is drawn from")
    parser.add_argument("--members", type=int, default=256, help="evaluated members (and as many non-members)")
    parser.add_argument("--dev", type=int, default=64, help="dev members (and as many non-members): the layer's pick")
    parser.add_argument("--probe-texts", type=int, default=200, help="the probe's training set, half its proxy's")
    parser.add_argument("--lrs", default="3e-4,1e-3,3e-3,1e-2", help="proxy learning rates swept")
    parser.add_argument("--folds", type=int, default=5, help="folds of the oracle and of the self-check")
    parser.add_argument("--tables-only", action="store_true", help="print the tables of the results file, run nothing")
    args = parser.parse_args()
    args.lrs = [float(x) for x in args.lrs.split(",")]
    lrs = [str(lr) for lr in args.lrs]
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"probe-power-{os.cpu_count()}core.json"
    if args.tables_only:
        runs = json.loads(path.read_text())["runs"]
        print(markdown_tables(runs, list(runs[0]["proxy_lrs"])))
        return
    runs = finished_runs(path, args)
    done = {run["seed"] for run in runs}
    for seed in (int(s) for s in args.seeds.split(",")):  # written after every seed: a long run keeps what it did
        if seed in done:
            print(f"seed {seed}: kept from {path.name}")
            continue
        runs.append(run_seed(seed, args))
        runs.sort(key=lambda run: run["seed"])
        payload = {
            "benchmark": "probe_power",
            "machine": machine(),
            "model": "SmolLM2-135M (built-in), fp32",
            "domain": args.domain,
            "folds": args.folds,
            "runs": runs,
        }
        path.write_text(json.dumps(payload, indent=1) + "\n")
        plot(runs, lrs, RESULTS / "probe-power.png")
    print(markdown_tables(runs, lrs))
    print(f"wrote {path} and {RESULTS / 'probe-power.png'}")


if __name__ == "__main__":
    main()
