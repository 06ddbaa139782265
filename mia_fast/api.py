"""The Python API: ``Detector`` scores texts with every requested method from one forward pass."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np

from mia_fast import methods as methods_module
from mia_fast.engine import StatsEngine, TokenCallback
from mia_fast.errors import MiaFastError
from mia_fast.freq import FrequencyTable, model_log_frequencies
from mia_fast.methods import DEFAULT_A, DEFAULT_KS, MethodRequest, ScoringInputs
from mia_fast.models import LoadedModel, load_model
from mia_fast.reductions import NUMPY, TritonReductions
from mia_fast.stats import TokenStats

DEFAULT_METHODS: tuple[str, ...] = ("loss", "zlib", "mink", "minkpp")
UNSCORABLE_WARNING = "nothing to score: empty text, or one token with no start token before it"


@dataclass
class Scores(Mapping[str, np.ndarray]):
    """Columnar scores: one float64 array per score column, in input order.

    ``n_tokens`` is the number of scored positions per text; ``warnings`` holds a message for each
    text that could not be scored (its scores are NaN) and None elsewhere.
    """

    columns: dict[str, np.ndarray]
    n_tokens: np.ndarray
    warnings: list[str | None]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def check_resources(requests: Sequence[MethodRequest], has_reference: bool, has_frequencies: bool) -> None:
    """Refuses methods whose extra inputs were not supplied, before any model is loaded."""
    needs = methods_module.needs_of(requests)
    if methods_module.NEEDS_REFERENCE in needs and not has_reference:
        raise MiaFastError("method 'ref' needs a reference model (--ref-model)")
    if methods_module.NEEDS_FREQUENCIES in needs and not has_frequencies:
        raise MiaFastError("method 'dcpdd' needs a token frequency table (--freq-table; build one with 'mia-fast freq build')")


class Detector:
    """Pretraining-data detector around a target model (and optionally a reference model).

    >>> detector = Detector()                       # built-in SmolLM2-135M
    >>> scores = detector.score(["some text"], methods=["loss", "mink", "minkpp"], k=[0.2])
    >>> scores["mink_0.2"]

    ``model`` and ``ref_model`` also take a :class:`LoadedModel` already in memory (e.g. one just
    fine-tuned); ``device`` and ``dtype`` then apply only to models loaded here.
    """

    def __init__(
        self,
        model: str | LoadedModel | None = None,
        *,
        gguf: str | os.PathLike | None = None,
        ref_model: str | LoadedModel | None = None,
        frequencies: str | os.PathLike | np.ndarray | FrequencyTable | None = None,
        device: str | None = None,
        dtype: str | None = None,
        prepend_start: bool = True,
        batch_tokens: int | None = None,
        max_length: int | None = None,
        backend: str = "auto",
    ) -> None:
        engine_options = dict(prepend_start=prepend_start, batch_tokens=batch_tokens, backend=backend)

        def loaded(name: str | LoadedModel | None, **options) -> LoadedModel:
            return name if isinstance(name, LoadedModel) else load_model(name, device=device, dtype=dtype, **options)

        self.target = StatsEngine(loaded(model, gguf=gguf), max_length=max_length, **engine_options)
        self.reference = StatsEngine(loaded(ref_model), **engine_options) if ref_model is not None else None
        # The bottom-k and DC-PDD reductions follow the statistics onto the kernels.
        self.reductions = TritonReductions(self.target.loaded.device) if self.target.backend == "triton" else NUMPY
        loaded_target = self.target.loaded
        self.log_frequencies = (
            model_log_frequencies(frequencies, loaded_target.tokenizer, loaded_target.vocab_size)
            if frequencies is not None
            else None
        )

    def token_stats(self, texts: Sequence[str]) -> TokenStats:
        """TokenStats of ``texts`` under the target model (save them to re-score without a forward pass)."""
        return self.target.compute(texts)

    def score(
        self,
        texts: Sequence[str],
        methods: Sequence[str] = DEFAULT_METHODS,
        k: Sequence[float] = DEFAULT_KS,
        a: float = DEFAULT_A,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> Scores:
        """Scores every text with every method (higher = more likely a member)."""
        return self.score_requests(texts, self.requests(methods, k), a, on_tokenized, on_progress)

    def requests(self, methods: Sequence[str], k: Sequence[float] = DEFAULT_KS) -> list[MethodRequest]:
        """Resolves method names and checks that this detector can serve them."""
        requests = methods_module.resolve_methods(methods, k)
        check_resources(requests, has_reference=self.reference is not None, has_frequencies=self.log_frequencies is not None)
        return requests

    def score_requests(
        self,
        texts: Sequence[str],
        requests: Sequence[MethodRequest],
        a: float = DEFAULT_A,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> Scores:
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise MiaFastError("every text must be a string")
        needs = methods_module.needs_of(requests)
        # Whitespace-only texts are scored as empty: NaN scores and a warning, never a crash.
        cleaned = [t if t.strip() else "" for t in texts]
        passes = {"stats": (self.target, cleaned)}
        if methods_module.NEEDS_LOWERCASE in needs:
            passes["lowercase_stats"] = (self.target, [t.lower() for t in cleaned])
        if methods_module.NEEDS_REFERENCE in needs:
            passes["reference_stats"] = (self.reference, cleaned)
        computed = {name: engine.compute(batch, on_tokenized, on_progress) for name, (engine, batch) in passes.items()}
        inputs = ScoringInputs(
            texts=cleaned if methods_module.NEEDS_TEXT in needs else None,
            log_frequencies=self.log_frequencies,
            a=a,
            reductions=self.reductions,
            **computed,
        )
        columns = methods_module.score(inputs, requests)
        n_tokens = computed["stats"].lengths
        warnings = [UNSCORABLE_WARNING if n == 0 else None for n in n_tokens]
        for name in columns:
            columns[name][n_tokens == 0] = np.nan
        return Scores(columns=columns, n_tokens=n_tokens, warnings=warnings)
