"""``mia-fast probe train``: fine-tune a proxy, read every layer's activations, fit and pick the probe."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm.auto import tqdm

from mia_fast.cli.options import (
    add_model_options,
    add_overwrite_and_quiet,
    batch_texts,
    batch_tokens,
    bounded,
    epochs,
    learning_rate,
    seed,
)
from mia_fast.cli.paths import check_command_outputs
from mia_fast.data import Fields, read_dataset
from mia_fast.data.gate import Output
from mia_fast.evaluation.probe_training import ProbeTraining, check_labelled, save_probe, train_probe
from mia_fast.methods.probe import NORMALIZATIONS
from mia_fast.methods.settings import Range
from mia_fast.pipeline.models import load_model


def add_command(name: str, probe: argparse.ArgumentParser) -> None:
    actions = probe.add_subparsers(dest="probe_command", required=True)
    train = actions.add_parser(
        "train",
        help="train a probe for a model on a labelled training set and pick its layer on a labelled dev set",
        description="TRAIN's labels say which texts the proxy (a fine-tuned copy of the model) is trained on (1) and "
        "which it is not (0); DEV's labels are membership in the model itself. The two must be disjoint "
        "from the texts the probe will judge.",
    )
    train.add_argument(
        "--train",
        required=True,
        help="labelled texts (.jsonl[.gz], .json[.gz], .csv, .parquet): at least 4 of each class",
    )
    train.add_argument("--dev", required=True, help="labelled texts for picking the layer: both classes")
    train.add_argument("--text-field", default="text")
    train.add_argument("--label-field", default="label")
    add_model_options(train, reference=False, spread=False)  # its proxy is fine-tuned: the model whole
    # The proxy's fine-tuning and the regressions, each defaulting to ProbeTraining's field of the same name. A
    # full-batch epoch of a logistic regression is cheap (the default is 1000), but not 10**12 of them.
    training = (
        ("--lr", learning_rate, "learning_rate", "the proxy's fine-tuning learning rate (default 1e-3)"),
        ("--epochs", epochs, "epochs", "the proxy's fine-tuning epochs (default 2)"),
        (
            "--batch-size",
            batch_texts,
            "batch_size",
            "texts per optimizer step of the proxy (default: every member, as the paper)",
        ),
        ("--micro-batch", batch_texts, "micro_batch", "texts per forward while fine-tuning (gradients accumulate)"),
        (
            "--probe-epochs",
            bounded(Range(1, 100_000, whole=True)),
            "probe_epochs",
            "full-batch epochs of each layer's logistic regression",
        ),
    )
    for flag, kind, field, help_text in training:
        train.add_argument(flag, type=kind, default=getattr(ProbeTraining, field), help=help_text)
    train.add_argument(
        "--normalization",
        choices=NORMALIZATIONS,
        default=ProbeTraining.normalization,
        help="standardise dev (and later scored) activations by their own statistics (split, the paper) or the "
        "training split's",
    )
    train.add_argument("--seed", type=seed, default=ProbeTraining.seed)
    train.add_argument(
        "--batch-tokens", type=batch_tokens, help="token budget per forward batch when reading activations"
    )
    train.add_argument("--out", required=True, help="the probe directory: probe.json, probe.safetensors, dev_auroc.png")
    train.add_argument("--keep-proxy", action="store_true", help="also save the fine-tuned proxy model in OUT/proxy")
    add_overwrite_and_quiet(train, "write into a directory that is not empty")
    train.set_defaults(handler=command_train)


def command_train(args: argparse.Namespace) -> None:
    out = Path(args.out)
    check_command_outputs(args, Output(out, folder=True))
    fields = Fields(args.text_field, id=None, label=args.label_field)
    train = read_dataset(args.train, fields, require_labels=True)
    dev = read_dataset(args.dev, fields, require_labels=True)
    members, _ = check_labelled(train, "training", 4)
    check_labelled(dev, "dev")
    settings = ProbeTraining(
        args.lr,
        args.epochs,
        args.batch_size,
        args.micro_batch,
        probe_epochs=args.probe_epochs,
        normalization=args.normalization,
        seed=args.seed,
    )
    loaded = load_model(args.model, gguf=args.gguf, device=args.device, dtype=args.dtype)
    steps = args.epochs * -(-len(members) // (args.batch_size or len(members)))
    bar = tqdm(
        total=steps, desc="fine-tuning the proxy", unit="step", disable=args.quiet, file=sys.stderr, dynamic_ncols=True
    )

    def on_step(step: int, loss: float) -> None:
        bar.set_postfix_str(f"loss {loss:.3f}")
        bar.update(1)

    bars = [bar]

    def on_progress(tokens: int) -> None:
        if len(bars) == 1:
            bars[0].close()
            bars.append(
                tqdm(
                    desc="reading every layer's activations",
                    unit="tok",
                    disable=args.quiet,
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
            )
        bars[-1].update(tokens)

    try:
        report = train_probe(
            loaded,
            train,
            dev,
            settings,
            keep_proxy=args.keep_proxy,
            batch_tokens=args.batch_tokens,
            on_step=on_step,
            on_progress=on_progress,
        )
    finally:
        for each in bars:
            each.close()
    written = save_probe(out, report)
    print(f"{'layer':>5} {'dev AUROC (split)':>18} {'dev AUROC (train)':>18}")
    for layer, (split, trained) in enumerate(zip(report.dev_auroc["split"], report.dev_auroc["train"])):
        mark = "  <- kept" if layer == report.probe.layer else ""
        print(f"{layer:>5} {split:>18.3f} {trained:>18.3f}{mark}")
    print(
        f"kept layer {report.probe.layer} ({args.normalization} normalisation); proxy loss "
        f"{report.proxy_losses[0]:.3f} -> {report.proxy_losses[-1]:.3f}"
    )
    print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
