"""The gradient-norm attack (white-box; as run for LLM pretraining data by Maini et al. 2024, "LLM
Dataset Inference", and MIMIR).

score = −mean over parameter tensors W of ‖∂ loss(x) / ∂W‖_p, with loss(x) the mean token loss of the
text. Training drives a member's loss to a flat point, so its gradient is smaller: a higher score means
a member.

Followed: MIMIR (``mimir/attacks/gradnorm.py``): the loss is the mean negative log-likelihood of the
text's tokens, the p-norm (p = inf by default; 1 and 2 too, ``gradnorm_norm``) is taken per parameter
tensor that gets a gradient (a tied embedding and head count once) and averaged, the model in eval
mode. Extensions: ``gradnorm_params`` restricts the tensors to names matching fnmatch patterns (e.g.
``model.layers.*.mlp.*``); a text longer than the window has the loss of every window's targets, as
the plain pass scores them. The engine runs one text at a time (see
``StatsEngine.gradient_norms``).
"""

from __future__ import annotations

import numpy as np

from mia_fast.methods.registry import MethodOptions, ScoringInputs, register
from mia_fast.pipeline.passes import GradientNormReadout, Pass


def gradnorm_pass(options: MethodOptions) -> Pass:
    return Pass(readout=GradientNormReadout(options.gradnorm_norm, options.gradnorm_params))


@register("gradnorm", passes=lambda options: (gradnorm_pass(options),))
def gradnorm_score(inputs: ScoringInputs) -> np.ndarray:
    """Minus the mean per-tensor norm of the loss gradient."""
    return -inputs.of(gradnorm_pass(inputs.options))
