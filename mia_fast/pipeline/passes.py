"""A pass is a value: which model, how each text is transformed, what context comes before it
(unscored), and what is read out of the forward.

Methods declare the passes they need; the engine runs each distinct (model, context, transformed
text, readout) once, whichever passes and texts ask for it. So the lowercase pass of a text that is
already lower case is the plain pass of that text, and costs no second forward.

A transform is any hashable callable ``str -> str`` that compares by value (a frozen dataclass), so
a method brings its own in its module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

TARGET = "target"
REFERENCE = "reference"


@dataclass(frozen=True)
class Identity:
    """The text as given."""

    def __call__(self, text: str) -> str:
        return text


@dataclass(frozen=True)
class TokenStatsReadout:
    """Per scored token: target id, logp, mu, var (TokenStats)."""


@dataclass(frozen=True)
class HiddenStatesReadout:
    """The hidden state of the last token of each (context + text) at the output of each decoder layer
    in ``layers`` (0-based; None means every layer): float32 [texts, layers, hidden]. The last layer's
    output is taken before the model's final norm."""

    layers: tuple[int, ...] | None = None


@dataclass(frozen=True)
class SamplesReadout:
    """``count`` continuations of each (context + text) sampled from the model at temperature 1 among its
    ``top_k`` likeliest tokens, decoded: str [texts, count]. Draws are keyed by ``seed``, the text and the
    sample's index, never by the batch; a continuation runs for as many tokens as the text has, or to its end token."""

    count: int
    seed: int = 0
    top_k: int = 50


@dataclass(frozen=True)
class GradientNormReadout:
    """The ``norm``-norm (1, 2 or inf) of the gradient of each (context + text)'s mean token loss with respect
    to each parameter tensor whose name matches one of ``parameters`` (fnmatch patterns; empty: every
    parameter), averaged over those tensors: float64 [texts]; NaN for a text with no scored token."""

    norm: float = float("inf")
    parameters: tuple[str, ...] = ()


TOKEN_STATS = TokenStatsReadout()
Readout = TokenStatsReadout | HiddenStatesReadout | SamplesReadout | GradientNormReadout


@dataclass(frozen=True)
class Pass:
    """One forward pass over every text.

    ``model`` names a model the detector holds (``target``, ``reference``); ``transform`` maps each
    text before tokenizing; ``prefix`` is text tokenized on its own and placed before each text's
    ids, its tokens unscored (the text keeps exactly the ids and scored targets of the plain pass).
    """

    model: str = TARGET
    transform: Callable[[str], str] = field(default_factory=Identity)
    prefix: str = ""
    readout: Readout = TOKEN_STATS


PLAIN = Pass()
