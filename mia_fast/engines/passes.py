"""A pass is a value: which model, how each text is transformed, what context comes before it
(unscored), and what is read out of the forward.

Methods declare the passes they need; the engine runs each distinct (model, context, transformed
text, readout) once, whichever passes and texts ask for it. So the lowercase pass of a text that is
already lower case is the plain pass of that text, and costs no second forward.

A transform is any hashable callable ``str -> str`` that compares by value (a frozen dataclass), so
a method brings its own in its module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

TARGET = "target"
REFERENCE = "reference"

TokenCallback = Callable[[int], None]
# What a readout reads: texts, and a prefix before each one (None: none).
Texts = Sequence[str]
Prefixes = Sequence[str] | None


@dataclass(frozen=True)
class Progress:
    """Where a pass says how far it is: ``tokenized`` gets the number of ids it is about to run, ``done`` the ids
    finished as they finish (either may be None)."""

    tokenized: TokenCallback | None = None
    done: TokenCallback | None = None

    def planned(self, ids: int) -> None:
        if self.tokenized is not None:
            self.tokenized(ids)

    def advanced(self, ids: int) -> None:
        if self.done is not None:
            self.done(ids)


QUIET = Progress()


@dataclass(frozen=True)
class Identity:
    """The text as given."""

    def __call__(self, text: str) -> str:
        return text


@dataclass(frozen=True)
class TokenStatsReadout:
    """Per scored token: target id, logp, mu, var (TokenStats)."""

    token_stats = True  # what a stats cache holds
    reader = "compute"  # the engine's method that serves it (mia_fast.engines.base)


@dataclass(frozen=True)
class HiddenStatesReadout:
    """The hidden state of the last token of each (context + text) at the output of each decoder layer
    in ``layers`` (0-based; None means every layer): float32 [texts, layers, hidden]. The last layer's
    output is taken before the model's final norm."""

    layers: tuple[int, ...] | None = None
    token_stats = False
    reader = "hidden_states"


@dataclass(frozen=True)
class SamplesReadout:
    """``count`` continuations of each (context + text) sampled from the model at temperature 1 among its
    ``top_k`` likeliest tokens (0: all), then the fewest of those whose probability reaches ``top_p`` (1: all),
    decoded: str [texts, count]. Draws are keyed by ``seed``, the text and the sample's index, never by the batch;
    a continuation runs for ``new_tokens`` tokens (None: as many as the text has), or to its end token."""

    count: int
    seed: int = 0
    top_k: int = 50
    top_p: float = 1.0
    new_tokens: int | None = None
    token_stats = False
    reader = "sample"


@dataclass(frozen=True)
class GradientNormReadout:
    """The ``norm``-norm (1, 2 or inf) of the gradient of each (context + text)'s mean token loss with respect
    to each parameter tensor whose name matches one of ``parameters`` (fnmatch patterns; empty: every
    parameter), averaged over those tensors: float64 [texts]; NaN for a text with no scored token."""

    norm: float = float("inf")
    parameters: tuple[str, ...] = ()
    token_stats = False
    reader = "gradient_norms"


@dataclass(frozen=True)
class TopLogprobsReadout:
    """TokenStats whose target ids and logp are exact but whose mu and var are estimated from each position's ``k``
    likeliest log-probs, as a server returns them (``mia_fast.ops.top_logprobs``): an approximation, kept apart from
    the plain pass's exact statistics."""

    k: int
    token_stats = False
    reader = "top_logprobs"


@dataclass(frozen=True)
class TokenSpansReadout:
    """Where in its text each token the plain pass scores lies: the character span [start, end) the tokenizer's offset
    mapping gives it (empty for a special token), int64 [scored, 2] per text, in an object array with a row per text.
    No forward runs; a prefix changes no span (the text keeps the ids of its plain pass). Methods comparing two
    models' tokens align them by these."""

    token_stats = False
    reader = "token_spans"


TOKEN_STATS = TokenStatsReadout()
TOKEN_SPANS = TokenSpansReadout()
Readout = (
    TokenStatsReadout
    | HiddenStatesReadout
    | SamplesReadout
    | GradientNormReadout
    | TopLogprobsReadout
    | TokenSpansReadout
)


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
