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

import math
from dataclasses import dataclass

import numpy as np

from mia_fast.engines.passes import GradientNormReadout, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import register
from mia_fast.methods.settings import Flag, MethodSettings, setting

NORMS = (1.0, 2.0, math.inf)


def comma_list(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split(",") if part)


@dataclass(frozen=True)
class GradnormSettings:
    norm: float = setting(
        math.inf, "the norm's order: 1, 2 or inf (as MIMIR)", Flag("gradnorm-norm", choices=NORMS, parse=float)
    )
    params: tuple[str, ...] = setting(
        (),
        "comma-separated fnmatch patterns of parameter names, e.g. 'model.layers.*.mlp.*' (default: all)",
        Flag("gradnorm-params", metavar="PATTERNS", parse=comma_list),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params or ()))
        if self.norm not in NORMS:
            raise MiaFastError(f"the gradient norm's order must be 1, 2 or inf, got {self.norm}")


def gradnorm_pass(settings: MethodSettings) -> Pass:
    gradnorm = settings.of(GradnormSettings)
    return Pass(readout=GradientNormReadout(gradnorm.norm, gradnorm.params))


@register("gradnorm", settings=[GradnormSettings], passes=lambda settings: (gradnorm_pass(settings),))
def gradnorm_score(inputs: ScoringInputs) -> np.ndarray:
    """Gradient norm: minus the mean per-tensor norm of the loss gradient."""
    return -inputs.of(gradnorm_pass(inputs.settings))
