"""A pass is a value: which model, how each text is transformed, what context comes before it
(unscored), and what is read out of the forward.

Methods declare the passes they need; the engine runs each distinct (model, context, transformed
text, readout) once, whichever passes and texts ask for it. So the lowercase pass of a text that is
already lower case is the plain pass of that text, and costs no second forward.

A transform is any hashable callable ``str -> str`` that compares by value (a frozen dataclass), so
a method brings its own in its module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

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


TOKEN_STATS = TokenStatsReadout()


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
    readout: TokenStatsReadout | HiddenStatesReadout = TOKEN_STATS


PLAIN = Pass()
