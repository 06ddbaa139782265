"""Fine-tuning a causal LM in place on texts: the controlled-contamination experiment plants members
with it, and the probe trains its proxy model with it.

A fine-tuning that diverges stops with :class:`TrainingDiverged` instead of handing back a model that is worse at
its own training texts: on a loss that is NaN or infinite, and at the end, when the last epoch's mean loss exceeds
the untouched model's mean loss on the same texts by more than ``DIVERGENCE_MARGIN``. Descent on a fixed set of
texts at a workable learning rate lowers their loss; ending above where it started means the steps overshoot (the
margin leaves room for the order of the batches and for dropout).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mia_fast.errors import MiaFastError
from mia_fast.pipeline.device import forked_generators
from mia_fast.pipeline.models import LoadedModel
from mia_fast.tokens.tokenize import tokenize

# How far above the untouched model's mean loss the last epoch's may end before the fine-tuning counts as diverged.
DIVERGENCE_MARGIN = 0.1


class TrainingDiverged(MiaFastError):
    """The fine-tuning loss became NaN or infinite, or ended clearly above where it started (``symptom`` says
    which); ``losses`` holds every step's loss up to where it stopped."""

    def __init__(self, symptom: str, losses: list[float]):
        super().__init__(f"fine-tuning diverged: {symptom}; lower the learning rate")
        self.losses = losses


@dataclass(frozen=True)
class FineTuning:
    """A fine-tuning: ``epochs`` over the texts at ``learning_rate``, ``batch_size`` texts per optimizer step run
    ``micro_batch`` at a time (default: all at once), every text cut to ``max_tokens`` tokens (None: whole), the
    order and dropout seeded by ``seed``."""

    epochs: int = 3
    learning_rate: float = 1e-4
    batch_size: int = 8
    max_tokens: int | None = 128
    seed: int = 0
    micro_batch: int | None = None


def fine_tune(
    loaded: LoadedModel,
    texts: Sequence[str],
    tuning: FineTuning,
    *,
    ascent: bool = False,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Fine-tunes ``loaded.model`` in place on ``texts`` as ``tuning`` says: causal LM loss over every token (the
    start token prepended as when scoring), AdamW at a constant learning rate without weight decay, gradients
    clipped to norm 1, each optimizer step the mean loss over every token of its texts (micro-batches weighted by
    the tokens they predict, so the micro-batch size changes nothing but memory). With ``ascent``, the loss
    is maximised instead (gradient ascent, the usual unlearning baseline); the losses returned are still the true
    ones. Returns the loss of every step; raises TrainingDiverged on a NaN or infinite loss and, unless
    ``ascent``, when the last epoch ends clearly above the untouched model's loss (see the module's notes)."""
    model, device = loaded.model, loaded.device
    epochs, learning_rate, batch_size, max_tokens, seed = (
        tuning.epochs,
        tuning.learning_rate,
        tuning.batch_size,
        tuning.max_tokens,
        tuning.seed,
    )
    micro_batch = min(tuning.micro_batch or batch_size, batch_size)
    sequences = tokenize(loaded.tokenizer, list(texts), prepend_start=True)
    if max_tokens is not None:
        sequences = [ids[: max_tokens + 1] for ids in sequences]
    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    generator = np.random.default_rng(seed + 2)
    losses: list[float] = []
    model.train()
    # Dropout draws from torch's global generator: seeded (and restored afterwards) so that a fine-tuning repeats
    # exactly.
    with torch.random.fork_rng(devices=forked_generators(device)):
        torch.manual_seed(seed)
        try:
            untouched = None if ascent else _mean_loss(model, sequences, batch_size, micro_batch, pad, device)
            for _ in range(epochs):
                order = generator.permutation(len(sequences))
                for start in range(0, len(order), batch_size):
                    step = order[start : start + batch_size]
                    parts = [
                        [sequences[i] for i in step[j : j + micro_batch]] for j in range(0, len(step), micro_batch)
                    ]
                    step_tokens = max(sum(map(_predicted_tokens, parts)), 1)
                    step_loss = 0.0
                    for part in parts:
                        loss = _causal_lm_loss(model, part, pad, device) * (_predicted_tokens(part) / step_tokens)
                        step_loss += float(loss.detach())
                        if not math.isfinite(step_loss):
                            raise TrainingDiverged(
                                f"the loss is {step_loss} at step {len(losses) + 1}", [*losses, step_loss]
                            )
                        (-loss if ascent else loss).backward()
                    losses.append(step_loss)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    if on_step is not None:
                        on_step(len(losses), losses[-1])
        finally:
            model.eval()
            optimizer.zero_grad(set_to_none=True)
    if untouched is not None and losses:
        _refuse_a_rise(untouched, losses, steps_per_epoch=math.ceil(len(sequences) / batch_size))
    return losses


def _mean_loss(
    model: torch.nn.Module, sequences: list[list[int]], batch_size: int, micro_batch: int, pad: int, device
) -> float:
    """The mean step loss over the texts in their order, as the fine-tuning measures it, without a step taken."""
    step_losses = []
    with torch.no_grad():
        for start in range(0, len(sequences), batch_size):
            step = sequences[start : start + batch_size]
            parts = [step[i : i + micro_batch] for i in range(0, len(step), micro_batch)]
            step_tokens = max(sum(map(_predicted_tokens, parts)), 1)
            step_losses.append(
                sum(float(_causal_lm_loss(model, part, pad, device)) * _predicted_tokens(part) for part in parts)
                / step_tokens
            )
    return float(np.mean(step_losses))


def _predicted_tokens(batch: list[list[int]]) -> int:
    return sum(len(ids) - 1 for ids in batch)


def _refuse_a_rise(untouched: float, losses: list[float], steps_per_epoch: int) -> None:
    last = float(np.mean(losses[-steps_per_epoch:]))
    if last > untouched * (1 + DIVERGENCE_MARGIN):
        raise TrainingDiverged(
            f"the last epoch's mean loss {last:.3g} ended above the untouched model's {untouched:.3g} on the same "
            "texts",
            losses,
        )


def _causal_lm_loss(model: torch.nn.Module, batch: list[list[int]], pad: int, device: torch.device) -> torch.Tensor:
    width = max(map(len, batch))
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = labels[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    return model(input_ids=input_ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
