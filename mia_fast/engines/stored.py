"""The engines that hold token statistics and no model: a stats cache read alone (``CacheOnlyEngine``, ``mia-fast
rescore``) and saved TokenStats (``SavedStatsEngine``). Nothing is tokenized or run forward; a text or pass they do
not hold is refused in one line."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from mia_fast.engines.passes import QUIET, TOKEN_STATS, Prefixes, Progress, Readout, Texts, TokenSpansReadout
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import StatsCache, provenance, text_key
from mia_fast.errors import MiaFastError


class _StatsOnlyEngine:
    """An engine that holds token statistics and no model: nothing to tokenize, nothing to run forward. A subclass
    says which passes it holds (``_refusal``: why not, or None) and looks their stats up (``_stats``)."""

    backend = "torch"
    device = None
    loaded = None
    vocabulary_stats = True
    weights_here = False

    def refusal(self, readout: Readout) -> str | None:
        """Token spans need a tokenizer and every readout but token statistics the model, which statistics alone
        lack; which texts and passes this engine holds is known only when they are asked for (``run`` refuses
        then)."""
        if isinstance(readout, TokenSpansReadout):
            return "where each token lies in its text, which token statistics do not hold: use 'mia-fast score'"
        if not readout.token_stats:
            return "the model, which token statistics do not hold: use 'mia-fast score'"
        return None

    def order(self, readout: Readout) -> int:
        return 0

    def run(self, readout: Readout, texts: Texts, prefixes: Prefixes = None, progress: Progress = QUIET) -> TokenStats:
        prefixes = list(prefixes) if prefixes is not None else [""] * len(texts)
        refusal = self._refusal(readout, prefixes)
        if refusal is not None:
            raise MiaFastError(refusal)
        stats = self._stats(texts, prefixes)
        progress.advanced(int(stats.lengths.sum()))
        return stats

    def _refusal(self, readout: Readout, prefixes: Sequence[str]) -> str | None:
        raise NotImplementedError

    def _stats(self, texts: Sequence[str], prefixes: Sequence[str]) -> TokenStats:
        raise NotImplementedError

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        raise MiaFastError("token statistics hold no tokenizer to give a text's ids: use 'mia-fast score'")

    def tokenize_ahead(self, texts: Sequence[str]) -> None:
        """Nothing to prepare: stats need no tokenizer."""

    def scored_positions(self, texts: Sequence[str]) -> np.ndarray:
        return self.run(TOKEN_STATS, texts).lengths


class CacheOnlyEngine(_StatsOnlyEngine):
    """Serves TokenStats passes from a stats cache alone: no model is loaded and nothing runs forward, so a
    text or pass the cache does not hold is refused."""

    def __init__(self, cache: StatsCache):
        self.cache = cache
        # Statistics a server gave hold no vocabulary mean or variance.
        self.vocabulary_stats = "server_model" not in cache.settings

    def provenance(self) -> dict[str, Any]:
        return provenance(self.cache.settings)

    def _refusal(self, readout: Readout, prefixes: Sequence[str]) -> str | None:
        if readout.token_stats:
            return None
        return (
            f"a cache holds token statistics only; a method reading {type(readout).__name__} needs the model: use "
            "'mia-fast score'"
        )

    def _stats(self, texts: Sequence[str], prefixes: Sequence[str]) -> TokenStats:
        keys = [text_key(prefix, text) for prefix, text in zip(prefixes, texts)]
        stats = None
        while stats is None:
            missing = self.cache.missing(keys)
            if missing:
                example = texts[missing[0]] if len(texts[missing[0]]) <= 60 else texts[missing[0]][:57] + "..."
                raise MiaFastError(
                    f"{len(missing)} pass(es) of these texts are not in the stats cache {self.cache.root} (e.g. of "
                    f"{example!r}); score them there first with 'mia-fast score --stats-cache' and the same methods"
                )
            stats = self.cache.stats(keys)
        return stats


class SavedStatsEngine(_StatsOnlyEngine):
    """Serves the plain pass of texts from a TokenStats file (``TokenStats.save``) whose row i holds text i of
    ``texts``: no model is loaded and nothing runs forward, so any other pass, or a text not among ``texts``,
    is refused."""

    def __init__(self, stats: TokenStats, texts: Sequence[str], source: str):
        if len(stats.lengths) != len(texts):
            raise MiaFastError(
                f"{source} holds the stats of {len(stats.lengths)} texts but the input has {len(texts)}; "
                "give the texts it was computed from, in the same order"
            )
        self.stats, self.source = stats, source
        self.rows = {text: i for i, text in reversed(list(enumerate(texts)))}

    def _refusal(self, readout: Readout, prefixes: Sequence[str]) -> str | None:
        if readout.token_stats and not any(prefixes):
            return None
        return (
            f"{self.source} holds the plain pass only; methods with other passes need a stats cache "
            "('mia-fast score --stats-cache DIR') or the model"
        )

    def provenance(self) -> dict[str, Any]:
        digest = hashlib.sha256(self.stats.offsets.tobytes() + self.stats.logp.tobytes()).hexdigest()
        return {"token_stats": digest}

    def _stats(self, texts: Sequence[str], prefixes: Sequence[str]) -> TokenStats:
        missing = next((text for text in texts if text not in self.rows), None)
        if missing is not None:
            raise MiaFastError(
                f"{self.source} holds the plain pass of the input's texts only, not of {missing[:60]!r} "
                "(a method's transformed copy of a text needs a stats cache or the model)"
            )
        return self.stats.take([self.rows[text] for text in texts])
