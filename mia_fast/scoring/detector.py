"""The Detector: scores texts with every requested method, running each pass the methods need once, on the
engines it holds (a model run here or behind a server, a stats cache, saved TokenStats, any engine of the registry
``mia_fast.scoring.engines``; ``mia_fast.engines.protocol.Engine``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, REFERENCE, TARGET, Pass, Progress, TokenCallback
from mia_fast.engines.protocol import Engine, EngineLimits, WeightsEngine
from mia_fast.engines.stats import TokenStats
from mia_fast.engines.stats_cache import open_cache
from mia_fast.engines.stored import CacheOnlyEngine, SavedStatsEngine
from mia_fast.errors import MiaFastError
from mia_fast.methods.derived import DERIVED_MODELS
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.online import DEFAULT_ONLINE_METHOD, OnlineSetting, TextWindows, online_scores
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS, Method, MethodRequest, resolve_methods
from mia_fast.methods.settings import MethodSettings
from mia_fast.ops.reductions import Ops
from mia_fast.pipeline.models import LoadedModel
from mia_fast.scoring.config import ComputeConfig, ModelConfig
from mia_fast.scoring.engines import engine_kind, weights_engine
from mia_fast.scoring.method_runs import (
    Settings,
    before_scoring,
    calibration_sets,
    check_available,
    check_texts,
    passes_of,
    prepare_settings,
    score,
)
from mia_fast.scoring.planner import run_passes
from mia_fast.served.client import ServerConfig
from mia_fast.tokens.tokenize import encodable

UNSCORABLE_WARNING = "nothing to score: empty text, or one token with no start token before it"


def _log(message: str) -> None:
    print(message, file=sys.stderr)


def _cleaned(texts: Sequence[str]) -> list[str]:
    """Whitespace-only texts are scored as empty: NaN scores and a warning, never a crash; a lone surrogate, which
    no encoder takes, becomes U+FFFD (with a warning)."""
    return [t if t.strip() else "" for t in encodable(texts)]


@dataclass
class OnlineScores:
    """Online detection: ``setting.method`` on every window of ``setting.window`` scored tokens of each text
    (``windows[i]``), and each text's best window: its score, its span ``[span_start, span_end)`` in scored
    tokens (-1 for a text with no scored token) and its decoded text (None there). Scored token ``t`` is the
    id after the first of the text's ids as the detector tokenizes it (``detector.target.tokenize``)."""

    setting: OnlineSetting
    windows: list[TextWindows]
    span_text: list[str | None]

    @property
    def max_score(self) -> np.ndarray:
        return np.array([w.max_score for w in self.windows], dtype=np.float64)

    @property
    def span_start(self) -> np.ndarray:
        return np.array([w.best_span[0] for w in self.windows], dtype=np.int64)

    @property
    def span_end(self) -> np.ndarray:
        return np.array([w.best_span[1] for w in self.windows], dtype=np.int64)


@dataclass
class Scores(Mapping[str, np.ndarray]):
    """Columnar scores: one float64 array per score column, in input order.

    ``n_tokens`` is the number of scored positions per text; ``warnings`` holds a message for each
    text that could not be scored (its scores are NaN) and None elsewhere; ``online`` the online
    detection, when asked for.
    """

    columns: dict[str, np.ndarray]
    n_tokens: np.ndarray
    warnings: list[str | None]
    online: OnlineScores | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)


def model_engines(config: ModelConfig, compute: ComputeConfig) -> dict[str, Engine]:
    """The target's engine, of the kind the engine registry gives its source, and the reference's (a model run
    here, with ``config.ref_model``), each with the stats cache of ``compute`` where it names one."""
    engines = {TARGET: engine_kind(config.model).build(config, compute, _log)}
    if config.ref_model is not None:
        engines[REFERENCE] = weights_engine(config.ref_model, config, compute, _log, None, config.reference_device)
    return engines


def engine_refusal(method: Method, settings: MethodSettings, engines: Mapping[str, EngineLimits]) -> str | None:
    """Why the engines cannot serve ``method`` (what it needs that they do not give), or None."""
    if method.vocabulary and not engines[TARGET].vocabulary_stats:
        return (
            "the exact mean and variance of log p over the whole vocabulary, which a server does not return; "
            "minkpp_top20 (or _top10, _top5) estimates them from the top log-probs it does return"
        )
    for needed in method.passes(settings):
        refusal = engines[needed.model].refusal(needed.readout) if needed.model in engines else None
        if refusal is not None:
            return refusal
    return None


def check_served(
    requests: Sequence[MethodRequest], settings: MethodSettings, engines: Mapping[str, EngineLimits]
) -> None:
    """Refuses, in one line, the first requested method whose needs the engines do not give."""
    for request in requests:
        refusal = engine_refusal(request.method, settings, engines)
        if refusal is not None:
            raise MiaFastError(f"method {request.method.name!r} needs {refusal}")


class Detector:
    """Pretraining-data detector around a target model (and optionally a reference model).

    >>> detector = Detector()                       # built-in SmolLM2-135M
    >>> scores = detector.score(["some text"], methods=["loss", "mink", "minkpp"], k=[0.2])
    >>> scores["mink_0.2"]

    ``model`` is a :class:`ModelConfig`, or its model alone (a hub name, a directory, a GGUF file, a
    :class:`LoadedModel` already in memory, e.g. one just fine-tuned, a ``ServerConfig``: any source an engine of
    the registry takes), or an engine of its own (anything following
    :class:`mia_fast.engines.protocol.Engine`, e.g. :meth:`from_stats_cache`'s). ``settings`` are the methods'
    settings (a :class:`MethodSettings` or settings objects, e.g. ``[RecallSettings(prefix_nonmembers=...)]``),
    made ready here: a probe loaded and checked against the model, a frequency table mapped onto its
    vocabulary. ``compute`` sets the batch budget and the stats cache: texts scored before, with any methods, k
    or cap, then need no forward pass.
    """

    def __init__(
        self,
        model: ModelConfig | str | os.PathLike | LoadedModel | ServerConfig | Engine | None = None,
        settings: Settings = None,
        compute: ComputeConfig | None = None,
    ) -> None:
        if hasattr(model, "run") and hasattr(model, "scored_positions"):
            self.engines: dict[str, Engine] = {TARGET: model}
        else:
            config = model if isinstance(model, ModelConfig) else ModelConfig(model=model)
            self.engines = model_engines(config, compute or ComputeConfig())
        self.target = self.engines[TARGET]
        self.reference = self.engines.get(REFERENCE)
        # The passes over methods' calibration texts, by (texts, passes, engines): run once, whatever the blocks.
        self._calibration: dict[tuple, tuple[list[str], TokenStats | None, dict[Pass, Any]]] = {}
        # The per-text reductions run where the target's statistics were made: its backend, on its device.
        self.ops = Ops(self.target.backend, self.target.device)
        self.settings = prepare_settings(settings, self.target.loaded)
        # The engine of each model made from the target's weights (``DERIVED_MODELS``), with the settings object
        # it was made for: made when a pass first needs it, again when those settings change.
        self._derived: dict[str, tuple[Any, Engine]] = {}

    @classmethod
    def from_stats_cache(cls, directory: str | os.PathLike, setting: str | None = None, settings: Settings = None):
        """A detector that scores from a stats cache alone (``mia-fast rescore``): no model is loaded, nothing runs
        forward, and a text or pass the cache does not hold is refused. ``setting`` picks one of the cache's
        model settings (a folder name or its start) where it holds several; ``settings`` are the methods'
        settings (e.g. the prefixes of ``recall``)."""
        return cls(CacheOnlyEngine(open_cache(directory, setting, log=_log)), settings)

    @classmethod
    def from_token_stats(cls, stats: str | os.PathLike | TokenStats, texts: Sequence[str], settings: Settings = None):
        """A detector that scores ``texts`` from their saved TokenStats (:meth:`token_stats`, ``TokenStats.save``;
        row i is text i) alone: methods reading only the plain pass (loss, zlib, mink, minkpp, and lowercase where a
        text is its own lowercase copy). ``settings`` as in :meth:`from_stats_cache`."""
        source = "the TokenStats" if isinstance(stats, TokenStats) else str(stats)
        loaded = stats if isinstance(stats, TokenStats) else TokenStats.load(stats)
        return cls(SavedStatsEngine(loaded, texts, source), settings)

    def with_settings(self, settings: Settings) -> MethodSettings:
        """This detector's settings with the objects of ``settings`` put in place of theirs, made ready."""
        return prepare_settings(settings, self.target.loaded, onto=self.settings)

    def provenance(self) -> dict[str, dict]:
        """What each engine's model is, as a scores file records it (see ``Engine.provenance``)."""
        return {role: engine.provenance() for role, engine in self.engines.items()}

    def token_stats(self, texts: Sequence[str]) -> TokenStats:
        """TokenStats of ``texts`` under the target model (save them to re-score without a forward pass)."""
        return self.target.run(PLAIN.readout, texts)

    def score(
        self,
        texts: Sequence[str],
        methods: Sequence[str] = DEFAULT_METHODS,
        k: Sequence[float] = DEFAULT_KS,
        settings: Settings = None,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
    ) -> Scores:
        """Scores every text with every method (higher = more likely a member); ``settings`` replace the
        detector's own for this call (e.g. ``[DcpddSettings(a=0.05, frequencies=...)]``)."""
        settings = self.with_settings(settings)
        return self.score_requests(texts, self.requests(methods, k, settings), settings, on_tokenized, on_progress)

    def score_online(
        self, texts: Sequence[str], window: int, stride: int | None = None, method: str = DEFAULT_ONLINE_METHOD
    ) -> OnlineScores:
        """Online detection (Min-K%++ §4.4): ``method`` (``loss``, ``mink_<k>`` or ``minkpp_<k>``) on every window
        of ``window`` scored tokens, one every ``stride`` (default ``window // 2``), from each text's one forward
        pass; a text's maximum window points at the span that looks most like a member."""
        return self.score_requests(texts, [], online=OnlineSetting(window, stride, method)).online

    def requests(
        self, methods: Sequence[str], k: Sequence[float] = DEFAULT_KS, settings: MethodSettings | None = None
    ) -> list[MethodRequest]:
        """Resolves method names and checks that this detector can serve them."""
        requests = resolve_methods(methods, k)
        settings = settings or self.settings
        check_available(requests, settings, models=[*self.engines, *self._derivable()])
        check_served(requests, settings, self.engines)
        return requests

    def score_requests(
        self,
        texts: Sequence[str],
        requests: Sequence[MethodRequest],
        settings: MethodSettings | None = None,
        on_tokenized: TokenCallback | None = None,
        on_progress: TokenCallback | None = None,
        online: OnlineSetting | None = None,
    ) -> Scores:
        """Scores every text with resolved ``requests`` under ``settings`` (default: the detector's, made ready),
        plus the online detection of ``online`` from the same pass."""
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise MiaFastError("every text must be a string")
        settings = settings or self.settings
        check_texts(settings, requests, texts)
        cleaned = _cleaned(texts)
        before_scoring(settings, requests, cleaned)
        passes = passes_of(requests, settings)
        refusal = engine_refusal(online.request.method, settings, self.engines) if online is not None else None
        if refusal is not None:
            raise MiaFastError(f"online detection with {online.method} needs {refusal}")
        if online is not None and PLAIN not in passes:
            passes.append(PLAIN)
        engines = self.engines_for(passes, settings)
        results = run_passes(engines, cleaned, passes, Progress(on_tokenized, on_progress))
        plain = results.pop(PLAIN, None)
        calibration = {
            texts: self.calibration_inputs(texts, needed, settings)
            for texts, needed in calibration_sets(requests, settings).items()
        }
        inputs = ScoringInputs(plain, results, cleaned, settings, self.ops, calibration)
        columns = score(inputs, requests)
        n_tokens = plain.lengths if plain is not None else self.target.scored_positions(cleaned)
        warnings = [UNSCORABLE_WARNING if n == 0 else None for n in n_tokens]
        for name in columns:
            columns[name][n_tokens == 0] = np.nan
        online_detection = self._online_detection(cleaned, plain, online) if online is not None else None
        return Scores(columns, n_tokens, warnings, online_detection)

    def calibration_inputs(
        self, texts: tuple[str, ...], passes: Sequence[Pass], settings: MethodSettings
    ) -> ScoringInputs:
        """The inputs of a method's calibration texts: its passes over them, run once for the engines that serve
        them and kept, so that no score depends on the texts scored with it or on how they were batched."""
        engines = self.engines_for(passes, settings)
        key = (texts, tuple(passes), tuple(engines.get(p.model) for p in passes))
        if key not in self._calibration:
            cleaned = _cleaned(texts)
            results = run_passes(engines, cleaned, passes)
            self._calibration[key] = (cleaned, results.pop(PLAIN, None), results)
        cleaned, plain, results = self._calibration[key]
        return ScoringInputs(plain, results, cleaned, settings, self.ops)

    def _derivable(self) -> list[str]:
        """The models this detector can make from its target's weights: none unless they are here."""
        return list(DERIVED_MODELS) if self.target.weights_here else []

    def engines_for(self, passes: Sequence[Pass], settings: MethodSettings) -> dict[str, Engine]:
        """The engines ``passes`` run on: the detector's own, and an engine set up as the target's (start token,
        batch budget, window, back end, stats cache) over each model made from its weights that a pass names."""
        engines = dict(self.engines)
        for model in dict.fromkeys(p.model for p in passes):
            derived = DERIVED_MODELS.get(model)
            if model in engines or derived is None or model not in self._derivable():
                continue
            value = settings.of(derived.settings)
            if model not in self._derived or self._derived[model][0] != value:
                target: WeightsEngine = self.target  # its weights are here: _derivable
                self._derived[model] = (value, target.derive(derived.make(target.loaded, value, _log)))
            engines[model] = self._derived[model][1]
        return engines

    def _online_detection(self, texts: Sequence[str], stats: TokenStats, online: OnlineSetting) -> OnlineScores:
        """The windows of ``online`` over ``texts``' plain-pass ``stats``, and each text's best span decoded."""
        windows = online_scores(stats, online, self.ops)
        tokenizer = getattr(self.target.loaded, "tokenizer", None)  # a served model may have none here
        # Scored token t predicts ids[t + 1]: the engine's context windows score every id after the first, in order.
        span_text = [
            tokenizer.decode(ids[start + 1 : end + 1]) if start >= 0 and tokenizer is not None else None
            for ids, (start, end) in zip(self.target.tokenize(texts), (w.best_span for w in windows))
        ]
        return OnlineScores(online, windows, span_text)
