"""What is known here of a model behind a server before any request: the tokenizer loaded here for it (named, or
found where the server says it loaded the model from), its vocabulary's size, and what a served model cannot give
(``ServedLimits``, the limits the engine registry checks before a run starts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mia_fast.engines.passes import (
    GradientNormReadout,
    HiddenStatesReadout,
    Readout,
    TokenSpansReadout,
    TopLogprobsReadout,
)
from mia_fast.errors import MiaFastError, one_line
from mia_fast.served.client import ServerConfig

_WEIGHTS_NEEDED = {
    HiddenStatesReadout: "the model's hidden states",
    GradientNormReadout: "the model's gradients",
}


@dataclass(frozen=True)
class ServedModel:
    """What is known here of a served model: its name, the tokenizer loaded here and its vocabulary size."""

    name: str
    tokenizer: Any
    vocab_size: int


def served_refusal(readout: Readout, *, has_tokenizer: bool) -> str | None:
    """Why a served model cannot give ``readout`` (None: it can), known before any request."""
    needed = _WEIGHTS_NEEDED.get(type(readout))
    if needed is not None:
        return f"{needed}, which a server does not return: score with the weights (--model)"
    if isinstance(readout, TopLogprobsReadout) and not has_tokenizer:
        return "the vocabulary's size, to spread the mass the top log-probs leave: give --tokenizer NAME"
    if isinstance(readout, TokenSpansReadout) and not has_tokenizer:
        return "the character spans of the served tokens, to align them with the reference's: give --tokenizer NAME"
    return None


@dataclass(frozen=True)
class ServedLimits:
    """What any served model cannot give, known before connecting: its engine's limits
    (``mia_fast.engines.protocol.EngineLimits``), for the checks made before a run starts."""

    has_tokenizer: bool
    vocabulary_stats = False
    weights_here = False

    def refusal(self, readout: Readout) -> str | None:
        return served_refusal(readout, has_tokenizer=self.has_tokenizer)


def load_served_model(config: ServerConfig) -> ServedModel | None:
    """The tokenizer of ``config`` loaded here (a hub name or directory), with its model's vocabulary size."""
    if config.tokenizer is None:
        return None
    from mia_fast.pipeline.models import check_model_source  # noqa: PLC0415 (torch: 1.5 s; served/ imports none until a tokenizer is loaded here)

    check_model_source(config.tokenizer)
    try:
        return _served_model(config.model, config.tokenizer)
    except (OSError, ValueError) as exc:
        raise MiaFastError(f"--tokenizer {config.tokenizer}: {one_line(exc)}") from None


def find_served_tokenizer(name: str, sources: Sequence[str]) -> tuple[ServedModel, str] | None:
    """The served model's own tokenizer, where one of ``sources`` (what the server says it loaded the model from,
    then the name it serves) is a folder here or a hub name in the cache or on a reachable hub; with the source it
    came from. None where none is."""
    from mia_fast.pipeline.models import local_or_hub  # noqa: PLC0415 (torch: 1.5 s; served/ imports none until a tokenizer is loaded here)

    for source in dict.fromkeys(s for s in sources if s):
        try:
            return _served_model(name, local_or_hub(source)), source
        except (MiaFastError, OSError, ValueError):
            continue
    return None


def _served_model(name: str, source: str) -> ServedModel:
    from transformers import AutoConfig, AutoTokenizer  # noqa: PLC0415 (1.7 s at start-up; only a tokenizer here needs it)

    tokenizer = AutoTokenizer.from_pretrained(source)
    try:
        vocab_size = int(AutoConfig.from_pretrained(source).vocab_size)
    except (OSError, ValueError, TypeError, AttributeError):
        vocab_size = len(tokenizer)
    return ServedModel(name, tokenizer, max(vocab_size, len(tokenizer)))
