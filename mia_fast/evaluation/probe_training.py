"""Training the probe of ``mia_fast.methods.probe``, as the public code does (github.com/zhliu0106/probing-lm-data):

1. A proxy, a copy of the target, is fine-tuned on the prompted *member* half of a small labelled
   training set (causal LM loss, AdamW at a constant learning rate, no weight decay, gradients clipped
   to 1). By default every member is in one optimizer step, so 2 epochs are 2 steps, as in the public
   code's batch of 100 (gradient accumulation keeps the memory at ``micro_batch`` texts).
2. The output of every decoder layer at the last token of each prompted text: from the proxy for the
   training texts, from the target for the dev texts.
3. Per layer, a logistic regression without bias on the standardised training activations (full
   batch, AdamW lr 1e-3, weight decay 0.1, 1000 epochs, seeded); its AUROC on the dev set, standardised
   by its own statistics (``split``, the public code) and by the training split's (``train``).
4. The layer with the best dev AUROC under the chosen normalisation is kept.

Deviations, named: all layers are fitted at once as one [layers, hidden] parameter (AdamW is
elementwise and the summed loss separates, so each layer's probe is what it would be alone) with a
seed per layer rather than one generator shared in sequence; the loss is the logits form of BCE
(the same function, without BCELoss's clamp of log at -100); the proxy is trained in the target's
dtype (the public code used DeepSpeed's fp32 master weights).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mia_fast.data.files import Dataset
from mia_fast.engines.passes import HiddenStatesReadout, Progress
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.figures import plot_dev_auroc
from mia_fast.evaluation.metrics import auroc
from mia_fast.generation.finetune import FineTuning, fine_tune
from mia_fast.methods.probe import CARD_FILE, NORMALIZATIONS, WEIGHTS_FILE, Probe, ProbePrompt, standardise
from mia_fast.pipeline.models import LoadedModel
from mia_fast.scoring.config import ComputeConfig, ModelConfig
from mia_fast.scoring.engines import engine_kind

MIN_PER_CLASS = 4


# The probe's weight decay, fixed as in the public code.
PROBE_WEIGHT_DECAY = 0.1


@dataclass(frozen=True)
class ProbeTraining:
    learning_rate: float = 1e-3  # the proxy's (the paper swept 8e-4 to 1e-3 for 1.1B, 2.5e-3 to 3.5e-3 for 13B)
    epochs: int = 2
    batch_size: int | None = None  # texts per optimizer step; None: every member at once
    micro_batch: int = 8
    probe_learning_rate: float = 1e-3
    probe_epochs: int = 1000
    normalization: str = "split"
    seed: int = 0


@dataclass
class ProbeReport:
    probe: Probe
    dev_auroc: dict[str, list[float]]  # normalisation -> AUROC of each layer's probe on the dev set
    proxy_losses: list[float]
    probe_losses: list[float]  # the training loss of the kept layer's probe, epoch by epoch
    seconds: dict[str, float] = field(default_factory=dict)
    proxy: LoadedModel | None = None
    layer_weights: np.ndarray | None = None  # [layers, hidden]: every layer's probe, not only the kept one


def check_labelled(dataset: Dataset, what: str, min_per_class: int = 1) -> tuple[list[str], list[str]]:
    """(members, non-members) of a labelled set, refused with a clear message when a class is short."""
    if dataset.labels is None:
        raise MiaFastError(f"the probe's {what} set needs 0/1 labels")
    members = [t for t, label in zip(dataset.texts, dataset.labels) if label == 1]
    nonmembers = [t for t, label in zip(dataset.texts, dataset.labels) if label == 0]
    if len(members) < min_per_class or len(nonmembers) < min_per_class:
        need = f"at least {min_per_class} of each class" if min_per_class > 1 else "both classes"
        raise MiaFastError(
            f"the probe's {what} set has {len(members)} members and {len(nonmembers)} non-members; it needs {need}"
        )
    return members, nonmembers


def fit_probes(features: np.ndarray, labels: np.ndarray, settings: ProbeTraining) -> tuple[np.ndarray, np.ndarray]:
    """One bias-free logistic regression per layer on ``features`` [layers, texts, hidden]: the weights
    [layers, hidden] and the loss of every layer at every epoch [epochs, layers]."""
    n_layers, _, hidden = features.shape
    bound = 1.0 / math.sqrt(hidden)  # nn.Linear's default initialisation
    initial = [
        torch.empty(hidden).uniform_(
            -bound, bound, generator=torch.Generator().manual_seed(settings.seed * 100_003 + layer)
        )
        for layer in range(n_layers)
    ]
    weight = torch.nn.Parameter(torch.stack(initial))
    x = torch.from_numpy(features.astype(np.float32))
    y = torch.from_numpy(np.asarray(labels, dtype=np.float32)).expand(n_layers, -1)
    optimizer = torch.optim.AdamW([weight], lr=settings.probe_learning_rate, weight_decay=PROBE_WEIGHT_DECAY)
    losses = np.empty((settings.probe_epochs, n_layers))
    for epoch in range(settings.probe_epochs):
        logits = torch.einsum("lnh,lh->ln", x, weight)
        per_layer = torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(dim=1)
        optimizer.zero_grad()
        per_layer.sum().backward()
        optimizer.step()
        losses[epoch] = per_layer.detach().numpy()
    return weight.detach().numpy(), losses


def train_probe(
    target: LoadedModel,
    train: Dataset,
    dev: Dataset,
    settings: ProbeTraining = ProbeTraining(),
    *,
    keep_proxy: bool = False,
    batch_tokens: int | None = None,
    on_step: Callable[[int, float], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ProbeReport:
    """Trains a probe for ``target`` on ``train`` (labels: members and non-members *of the proxy*) and
    picks its layer on ``dev`` (labels: members and non-members of the target). ``on_step`` sees each
    fine-tuning step and its loss, ``on_progress`` the tokens of each batch of activations read."""
    if settings.normalization not in NORMALIZATIONS:
        raise MiaFastError(f"normalisation must be one of {', '.join(NORMALIZATIONS)}, got {settings.normalization!r}")
    members, _ = check_labelled(train, "training", MIN_PER_CLASS)
    check_labelled(dev, "dev")
    prompt = ProbePrompt()
    seconds, started = {}, time.perf_counter()

    proxy, proxy_losses = _fine_tuned_proxy(target, [prompt(t) for t in members], settings, on_step)
    seconds["proxy_fine_tune"] = time.perf_counter() - started

    started = time.perf_counter()
    compute = ComputeConfig(batch_tokens=batch_tokens, progress=False)
    runs = [(proxy, [prompt(t) for t in train.texts]), (target, [prompt(t) for t in dev.texts])]
    proxy = proxy if keep_proxy else None
    (train_acts, dev_acts), model_card = _activations(runs, compute, on_progress)
    seconds["activations"] = time.perf_counter() - started

    started = time.perf_counter()
    train_by_layer, dev_by_layer = (
        train_acts.transpose(1, 0, 2).astype(np.float64),
        dev_acts.transpose(1, 0, 2).astype(np.float64),
    )
    train_mean = train_by_layer.mean(axis=1, keepdims=True)
    train_std = train_by_layer.std(axis=1, ddof=1, keepdims=True)
    weights, losses = fit_probes(standardise(train_by_layer), np.asarray(train.labels), settings)
    dev_features = {"split": standardise(dev_by_layer), "train": standardise(dev_by_layer, train_mean, train_std)}
    dev_labels = np.asarray(dev.labels)
    dev_auroc = {
        name: [auroc(dev_labels, features[layer] @ weights[layer]) for layer in range(len(weights))]
        for name, features in dev_features.items()
    }
    best = int(np.argmax(dev_auroc[settings.normalization]))
    seconds["probes"] = time.perf_counter() - started

    card = {
        "model": model_card,
        "dev_auroc": dev_auroc,
        "best_layer": {name: int(np.argmax(values)) for name, values in dev_auroc.items()},
        "settings": asdict(settings),
        "train": {"members": len(members), "nonmembers": len(train.texts) - len(members)},
        "dev": {"members": int(dev_labels.sum()), "nonmembers": int(len(dev_labels) - dev_labels.sum())},
        "proxy_losses": proxy_losses,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
    }
    mean, std = train_mean[best, 0].astype(np.float32), train_std[best, 0].astype(np.float32)
    probe = Probe(weights[best].astype(np.float32), best, settings.normalization, mean, std, card)
    return ProbeReport(probe, dev_auroc, proxy_losses, losses[:, best].tolist(), seconds, proxy, weights)


def _activations(
    runs: list[tuple[LoadedModel, list[str]]], compute: ComputeConfig, on_progress: Callable[[int], None] | None
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Each model's state of every decoder layer at the last token of each of its texts (float32 [texts, layers,
    hidden]), read by the engine the registry builds for it (its reductions in torch); and what a probe's card
    records of the last model, the one it is trained for. ``runs`` is emptied as it goes, so that a model no one
    else holds (the proxy) is let go before the next one runs."""
    states = []
    while runs:
        model, texts = runs.pop(0)
        engine = engine_kind(model).build(ModelConfig(model=model, backend="torch"), compute, lambda line: None)
        states.append(engine.run(HiddenStatesReadout(), texts, progress=Progress(done=on_progress)))
    layers, hidden = states[-1].shape[1:]
    weights = engine.provenance()["weights"]
    return states, {"name": model.name, "weights_fingerprint": weights, "hidden_size": hidden, "layers": layers}


def _fine_tuned_proxy(
    target: LoadedModel, members: list[str], settings: ProbeTraining, on_step: Callable[[int, float], None] | None
) -> tuple[LoadedModel, list[float]]:
    """A copy of ``target`` fine-tuned on the proxy's members (prompted), and its losses."""
    proxy = LoadedModel(
        copy.deepcopy(target.model), target.tokenizer, f"{target.name} (proxy)", target.device, target.dtype
    )
    torch.manual_seed(settings.seed)
    tuning = FineTuning(
        settings.epochs,
        settings.learning_rate,
        settings.batch_size or len(members),
        max_tokens=None,
        seed=settings.seed,
        micro_batch=settings.micro_batch,
    )
    return proxy, fine_tune(proxy, members, tuning, on_step=on_step)


def save_probe(directory: Path, report: ProbeReport) -> list[Path]:
    """The probe (weights, then the card holding their checksum), the dev-AUROC figure and, if kept, the proxy
    model."""
    report.probe.save(directory)
    written = [
        directory / CARD_FILE,
        directory / WEIGHTS_FILE,
        plot_dev_auroc(directory / "dev_auroc.png", report.dev_auroc, report.probe.layer),
    ]
    if report.proxy is not None:
        report.proxy.model.save_pretrained(directory / "proxy")
        report.proxy.tokenizer.save_pretrained(directory / "proxy")
        written.append(directory / "proxy")
    return written
