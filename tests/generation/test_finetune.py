"""A fine-tuning step is the mean loss over every token of its texts, whatever the micro-batch: a short text in a
last micro-batch of its own weighs no more than in the whole batch."""

import pytest
import torch

from mia_fast import load_model
from mia_fast.generation.finetune import FineTuning, fine_tune

TEXTS = [
    "the river runs under the old stone bridge and past the market where the lamps are lit at dusk",
    "a letter",
    "summer engine paper music window garden field cloud harbour winter",
    "stone",
    "the harbour lamp",
]


def tuned(model_dir, micro_batch):
    loaded = load_model(str(model_dir))
    tuning = FineTuning(epochs=2, learning_rate=1e-3, batch_size=5, max_tokens=None, micro_batch=micro_batch)
    losses = fine_tune(loaded, TEXTS, tuning)
    return losses, torch.cat([p.detach().flatten() for p in loaded.model.parameters()])


def test_micro_batches_change_no_step_loss_and_no_weight(tiny_model_dir):
    whole_losses, whole_weights = tuned(tiny_model_dir, None)
    for micro_batch in (1, 2, 4):  # 4 leaves a last micro-batch of one short text
        losses, weights = tuned(tiny_model_dir, micro_batch)
        assert losses == pytest.approx(whole_losses, rel=1e-5)
        # Gradients summed in another order differ in the last fp32 bits, and Adam's normalisation makes that up to a
        # few 1e-5 on a weight whose gradient is near zero (1.3e-5 seen on an Intel Xeon with AMX). A micro-batch
        # weighed wrong moves the step losses above, and the weights by about the learning rate.
        assert torch.allclose(weights, whole_weights, atol=5e-5)
