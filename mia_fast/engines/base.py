"""The flow every engine of a model shares, written once: a readout goes to the reader its type names
(``reader`` of each readout in :mod:`~mia_fast.engines.passes`), TokenStats pass through the stats cache, the
settings that change a token's statistics name that cache and make the provenance a scores file records, and a
sampled continuation's prompt is cut to the window.

A local model (:class:`~mia_fast.pipeline.engine.StatsEngine`) and a model behind a server
(:class:`~mia_fast.served.server.ServerEngine`) each say only what differs: which settings change their
statistics (``cache_settings``), how the TokenStats a cache lacks are computed (``_missing_stats``), and the readers
they serve (``refusal`` names those they do not).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mia_fast.engines.passes import QUIET, GradientNormReadout, Prefixes, Progress, Readout, SamplesReadout, Texts
from mia_fast.engines.protocol import EngineLimits
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import StatsCache, cached_stats, provenance
from mia_fast.errors import MiaFastError
from mia_fast.tokens.tokenize import TextRows, token_spans, tokenize

Log = Callable[[str], None]


@dataclass(frozen=True)
class WeightsHereLimits:
    """The limits of a model whose weights are here: none. It gives every readout, the exact moments over the
    vocabulary, and weights to make other models from."""

    vocabulary_stats = True
    weights_here = True

    def refusal(self, readout: Readout) -> str | None:
        return None


WEIGHTS_HERE = WeightsHereLimits()

# What a model spread over devices cannot give, by the readout that would need it.
_NOT_SPREAD = {
    GradientNormReadout: "the model's gradients",
    SamplesReadout: "continuations sampled from the model",
}


@dataclass(frozen=True)
class SpreadWeightsLimits:
    """The limits of a model whose layers a device map spreads over devices (``--device-map``): its own forward gives
    TokenStats, hidden states and top log-probs with the exact moments over the vocabulary, but no gradients or
    sampled continuations, and no weights to make other models from (a copy fine-tuned here needs the model whole)."""

    vocabulary_stats = True
    weights_here = False

    def refusal(self, readout: Readout) -> str | None:
        needed = _NOT_SPREAD.get(type(readout))
        if needed is None:
            return None
        return f"{needed}, which a model spread over devices by --device-map does not give: load it whole (--device)"


SPREAD_WEIGHTS = SpreadWeightsLimits()


class ModelEngine(TextRows):
    """An engine of one model (see the module docstring). A subclass sets ``loaded`` (the model here, or only its
    tokenizer, or None), ``prepend_start``, ``max_length`` and ``limits``: what it cannot give, declared once, as its
    kind in the engine registry says it before the engine is built."""

    loaded: Any
    prepend_start: bool
    limits: EngineLimits
    cache: StatsCache | None = None
    _cache_place: tuple[str | os.PathLike, Log] | None = None
    _ahead_tokenizer: Any = None

    def cache_settings(self) -> dict[str, Any]:
        """Everything that changes a token's statistics, for the stats cache and the provenance."""
        raise NotImplementedError

    def model_name(self) -> str:
        """The model as a log line names it."""
        raise NotImplementedError

    def _missing_stats(self, texts: Texts, prefixes: Sequence[str], progress: Progress) -> TokenStats:
        """TokenStats of the texts (each after its prefix) that the stats cache does not hold."""
        raise NotImplementedError

    @property
    def vocabulary_stats(self) -> bool:
        return self.limits.vocabulary_stats

    @property
    def weights_here(self) -> bool:
        return self.limits.weights_here

    def refusal(self, readout: Readout) -> str | None:
        return self.limits.refusal(readout)

    def order(self, readout: Readout) -> int:
        return 0

    def run(self, readout: Readout, texts: Texts, prefixes: Prefixes = None, progress: Progress = QUIET) -> Any:
        """What ``readout`` reads out of ``texts`` (each after its prefix): TokenStats, or an array with a row per
        text, from the engine's method the readout names."""
        refusal = self.refusal(readout)
        if refusal is not None:
            raise MiaFastError(f"a method here needs {refusal}")
        if readout.token_stats:
            return self.compute(texts, prefixes, progress)
        if readout.reader == "token_spans":
            return self.token_spans(texts)
        return getattr(self, readout.reader)(texts, readout, prefixes, progress)

    def compute(self, texts: Texts, prefixes: Prefixes = None, progress: Progress = QUIET) -> TokenStats:
        """TokenStats of ``texts`` (each after its prefix in ``prefixes``, unscored), in input order, saying how far
        they are through ``progress``.
        With a stats cache, only the texts it does not hold are computed, and they are added to it."""
        return cached_stats(
            self.cache,
            texts,
            prefixes,
            lambda missing, missing_prefixes: self._missing_stats(missing, missing_prefixes, progress),
        )

    def provenance(self) -> dict[str, Any]:
        """What a scores file records of this engine (:func:`mia_fast.engines.stats_cache.provenance`): a resumed
        file must come from the same."""
        return provenance(self.cache_settings())

    def use_cache(self, directory: str | os.PathLike, log: Log) -> None:
        """Keeps every TokenStats pass of this engine in a stats cache under ``directory``: a rerun computes none of
        what it holds."""
        self._cache_place = (directory, log)
        self.cache = self.stats_cache()
        note = self.cache.describe_others(self.model_name())
        if note is not None:
            log(note)

    def stats_cache(self, more: dict[str, Any] | None = None) -> StatsCache | None:
        """The stats cache of this engine's settings and ``more`` (what else sets the statistics apart, such as a
        number of top log-probs), in the folder :meth:`use_cache` named; None without one."""
        if self._cache_place is None:
            return None
        directory, log = self._cache_place
        return StatsCache(directory, {**self.cache_settings(), **(more or {})}, log)

    def token_spans(self, texts: Sequence[str]) -> Any:
        """The character span of each token the plain pass scores in each text (``TokenSpansReadout``), from the
        tokenizer here."""
        return token_spans(self.loaded.tokenizer, texts, prepend_start=self.prepend_start)

    def _encode(self, texts: Sequence[str], *, ahead: bool) -> list[list[int]]:
        if not ahead:
            return tokenize(self.loaded.tokenizer, texts, prepend_start=self.prepend_start)
        if self._ahead_tokenizer is None:
            self._ahead_tokenizer = copy.deepcopy(self.loaded.tokenizer)
        return tokenize(self._ahead_tokenizer, texts, prepend_start=self.prepend_start)

    def sample_prompts(
        self, texts: Sequence[str], readout: SamplesReadout, prefixes: Sequence[str] | None
    ) -> list[tuple[int, list[int], int]]:
        """(text index, prompt ids, new tokens) of each non-empty text to sample after: a continuation runs for
        ``readout.new_tokens`` tokens, or as many as the text has (bar its start token), at most half the window,
        and the prompt (prefix + text) keeps its last ids that leave it room."""
        prefixes = prefixes if prefixes is not None else [""] * len(texts)
        prompts = []
        for i, (text, ids, prefix) in enumerate(zip(texts, self.tokenize(texts), prefixes)):
            if text:
                new_tokens = min(readout.new_tokens or max(len(ids) - 1, 1), self.max_length // 2)
                prompts.append((i, (self.context_ids(prefix) + ids)[-(self.max_length - new_tokens) :], new_tokens))
        return prompts
