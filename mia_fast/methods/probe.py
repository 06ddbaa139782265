"""The probe (Liu et al. 2024, "Probing Language Models for Pre-training Data Detection", ACL; public
code github.com/zhliu0106/probing-lm-data): a logistic regression on one decoder layer's hidden state
of the last token of the text wrapped in a prompt. It is trained by ``mia_fast.evaluation.probe_training``;
this module holds the trained probe (its file and its score) and the ``probe`` method.

score = sigmoid(w · standardise(h_layer(prompt(text)))), higher = member. As in the public code the
activations of the texts scored together are standardised by their own mean and (n - 1) standard
deviation per feature (``split``); ``train`` standardises them by the training split's statistics
instead, which makes a text's score independent of the others. A feature with zero spread is only
centred (divided by 1), where the public code would divide by zero.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load as load_tensors
from safetensors.numpy import save_file

from mia_fast.data.artefacts import read_checked_json, replacing, sha256_file, write_checked_json
from mia_fast.engines.passes import HiddenStatesReadout, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import Flag, GivesExample, MethodSettings, PreparesForModel, setting

PROMPT = "Here is a statement:\n\n[TEXT]\n\nIs the above statement correct? Answer: "
NORMALIZATIONS = ("split", "train")
CARD_FILE = "probe.json"
WEIGHTS_FILE = "probe.safetensors"
FORMAT = "mia-fast probe v2"
WRITER = "mia-fast probe train"


@dataclass(frozen=True)
class ProbePrompt:
    """The public code's prompt around each text."""

    def __call__(self, text: str) -> str:
        return PROMPT.replace("[TEXT]", text)


def standardise(activations: np.ndarray, mean: np.ndarray | None = None, std: np.ndarray | None = None) -> np.ndarray:
    """(x - mean) / std per feature over the rows of ``activations`` [..., rows, features]; the rows' own
    statistics (std with n - 1) unless ``mean`` and ``std`` are given."""
    if mean is None:
        mean = activations.mean(axis=-2, keepdims=True)
        std = activations.std(axis=-2, ddof=1, keepdims=True)
    return (activations - mean) / np.where(std > 0, std, 1.0)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-logits)) without overflow: exp of a non-positive number only."""
    decay = np.exp(-np.abs(logits))
    return np.where(logits >= 0, 1.0 / (1.0 + decay), decay / (1.0 + decay))


@dataclass(frozen=True, eq=False)
class Probe:
    """A trained probe: the weight of its layer, that layer, the normalisation it scores with, the
    training split's statistics at that layer, and its card (model, settings, per-layer dev AUROC)."""

    weight: np.ndarray  # float32 [hidden]
    layer: int
    normalization: str
    train_mean: np.ndarray  # float32 [hidden]
    train_std: np.ndarray  # float32 [hidden]
    card: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise MiaFastError(
                f"probe normalisation must be one of {', '.join(NORMALIZATIONS)}, got {self.normalization!r}"
            )

    @property
    def scoring_pass(self) -> Pass:
        return Pass(transform=ProbePrompt(), readout=HiddenStatesReadout((self.layer,)))

    def with_normalization(self, normalization: str) -> Probe:
        return Probe(self.weight, self.layer, normalization, self.train_mean, self.train_std, self.card)

    def score(self, activations: np.ndarray) -> np.ndarray:
        """Member probability of each row of ``activations`` [texts, hidden] (float64)."""
        if self.normalization == "split":
            if len(activations) < 2:
                raise MiaFastError(
                    "a probe with split normalisation standardises the texts scored together, so it needs at least 2; "
                    "score more texts at once or use the training split's statistics (--probe-normalization train)"
                )
            x = standardise(activations.astype(np.float64))
        else:
            x = standardise(activations.astype(np.float64), self.train_mean, self.train_std)
        return sigmoid(x @ self.weight.astype(np.float64))

    def check_model(self, name: str, hidden_size: int, layers: int, fingerprint: str) -> None:
        """Refuses a model the probe was not trained for."""
        trained_for = self.card.get("model", {})
        if trained_for.get("weights_fingerprint") != fingerprint:
            raise MiaFastError(
                f"this probe was trained for {trained_for.get('name', 'another model')!r} (weights fingerprint "
                f"{str(trained_for.get('weights_fingerprint'))[:12]}…), not {name!r} ({fingerprint[:12]}…); "
                "train one for this model"
            )
        if len(self.weight) != hidden_size or self.layer >= layers:
            raise MiaFastError(
                f"the probe reads layer {self.layer} of hidden size {len(self.weight)}; "
                f"the model has {layers} layers of {hidden_size}"
            )

    def save(self, directory: str | os.PathLike) -> Path:
        """Writes the weights, then the card holding their checksum: a probe cut off while saving is never loaded."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {"weight": self.weight, "train_mean": self.train_mean, "train_std": self.train_std}
        with replacing(directory / WEIGHTS_FILE) as temporary:
            save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, str(temporary))
        card = {
            **self.card,
            "layer": self.layer,
            "normalization": self.normalization,
            "prompt": PROMPT,
            "weights_sha256": sha256_file(directory / WEIGHTS_FILE),
        }
        write_checked_json(directory / CARD_FILE, card, FORMAT)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Probe:
        """Reads a probe written by :meth:`save`; a card or weights changed since are refused."""
        directory = Path(directory)
        if not directory.is_dir():
            raise MiaFastError(f"{directory}: no such probe directory (train one with '{WRITER}')")
        card = read_checked_json(directory / CARD_FILE, FORMAT, WRITER)
        weights = directory / WEIGHTS_FILE
        try:
            data = weights.read_bytes()
        except OSError as exc:
            raise MiaFastError(f"cannot read {weights}: {exc.strerror or exc}") from None
        if hashlib.sha256(data).hexdigest() != card.get("weights_sha256"):
            raise MiaFastError(
                f"{weights}: checksum mismatch: the file was changed after it was written; "
                f"train the probe again ({WRITER})"
            )
        try:
            tensors = load_tensors(data)
        except SafetensorError as exc:
            raise MiaFastError(f"{directory}: not a readable probe ({exc})") from None
        if card.get("prompt") != PROMPT:
            raise MiaFastError(f"{directory}: the probe was trained with another prompt")
        missing = {"weight", "train_mean", "train_std"} - set(tensors)
        shapes = {tensors[k].shape for k in tensors}
        if missing or len(shapes) != 1 or len(next(iter(shapes))) != 1 or not isinstance(card.get("layer"), int):
            raise MiaFastError(
                f"{directory}: a malformed probe (tensors {sorted(tensors)}, layer {card.get('layer')!r})"
            )
        info = {k: v for k, v in card.items() if k not in ("layer", "normalization", "prompt", "weights_sha256")}
        return cls(
            tensors["weight"],
            card["layer"],
            card.get("normalization"),
            tensors["train_mean"],
            tensors["train_std"],
            info,
        )


@dataclass(frozen=True)
class ProbeSettings(PreparesForModel, GivesExample):
    probe: str | os.PathLike | Probe | None = setting(
        None,
        "a probe trained for this model ('mia-fast probe train')",
        Flag("probe", metavar="PROBE_DIR", path=True),
        required=True,
        supply="a trained probe (--probe PROBE_DIR; train one with 'mia-fast probe train')",
    )
    normalization: str | None = setting(
        None,
        "standardise the probe's activations by the scored texts' own statistics (split, the paper) or the "
        "training split's (default: as trained)",
        Flag("probe-normalization", choices=NORMALIZATIONS),
    )

    def prepare(self, model: Any) -> ProbeSettings:
        """The probe loaded, with its normalisation replaced by ``normalization`` if given, and checked against
        the target model where there is one."""
        if self.probe is None:
            return self
        probe = self.probe if isinstance(self.probe, Probe) else Probe.load(self.probe)
        probe = probe.with_normalization(self.normalization) if self.normalization else probe
        if model is not None:
            config = model.model.config
            probe.check_model(model.name, config.hidden_size, config.num_hidden_layers, model.weights_fingerprint())
        return ProbeSettings(probe)

    @classmethod
    def example(cls, model: Any) -> ProbeSettings:
        """An UNTRAINED probe for ``model``: random weights on its last layer, standardised by the training split's
        statistics (zero mean, unit spread). It runs; it detects nothing (train one: 'mia-fast probe train')."""
        config = model.model.config
        hidden, ones = config.hidden_size, np.ones(config.hidden_size, np.float32)
        weight = np.random.default_rng(0).normal(size=hidden).astype(np.float32)
        card = {"model": {"name": model.name, "weights_fingerprint": model.weights_fingerprint()}}
        return cls(Probe(weight, config.num_hidden_layers - 1, "train", np.zeros(hidden, np.float32), ones, card))


def _loaded_probe(settings: MethodSettings) -> Probe | None:
    probe = settings.of(ProbeSettings).probe
    if probe is not None and not isinstance(probe, Probe):
        raise MiaFastError("the probe must be loaded first (a Detector loads it)")
    return probe


def _probe_passes(settings: MethodSettings) -> tuple[Pass, ...]:
    probe = _loaded_probe(settings)
    return (probe.scoring_pass,) if probe is not None else ()


@register(
    "probe",
    settings=[ProbeSettings],
    passes=_probe_passes,
    pooled=lambda settings: (probe := _loaded_probe(settings)) is not None and probe.normalization == "split",
)
def probe_score(inputs: ScoringInputs) -> np.ndarray:
    """The trained probe's member probability from the last token's hidden state of the prompted text."""
    probe = _loaded_probe(inputs.settings)
    return probe.score(inputs.of(probe.scoring_pass)[:, 0, :])
