"""Detection methods: small pure functions from TokenStats (plus declared needs) to scores.

Every score is oriented so that higher means more likely a member (DESIGN §2). A method that
takes k computes all requested k at once and returns one column per k, named ``{name}_{k}``.
Adding a method touches this file only: write the function and decorate it with ``register``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.reductions import NUMPY, Reductions, segment_mean
from mia_fast.stats import TokenStats

DEFAULT_KS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DEFAULT_A = 0.01
# Floor on var in Min-K%++ so that z is finite on fully peaked rows.
VAR_FLOOR = 1e-12

# What a method may declare it needs beyond the target model's TokenStats.
NEEDS_TEXT = "text"
NEEDS_LOWERCASE = "lowercase"
NEEDS_REFERENCE = "reference"
NEEDS_FREQUENCIES = "frequencies"


@dataclass(frozen=True)
class ScoringInputs:
    """Everything a method may read. Fields stay None unless some method declared the need."""

    stats: TokenStats
    texts: Sequence[str] | None = None
    lowercase_stats: TokenStats | None = None
    reference_stats: TokenStats | None = None
    log_frequencies: np.ndarray | None = None  # ln f(v) for every id v of the target vocabulary
    a: float = DEFAULT_A
    reductions: Reductions = NUMPY  # the back end of the bottom-k and DC-PDD reductions


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[..., np.ndarray]
    needs: frozenset[str] = field(default_factory=frozenset)
    takes_k: bool = False


REGISTRY: dict[str, Method] = {}


def register(name: str, needs: Sequence[str] = (), takes_k: bool = False) -> Callable:
    def decorate(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        REGISTRY[name] = Method(name, fn, frozenset(needs), takes_k)
        return fn

    return decorate


def k_column(name: str, k: float) -> str:
    """Column name of a k-method, e.g. ``mink_0.2`` and ``mink_1.0``."""
    return f"{name}_{float(k)!r}"


@dataclass(frozen=True)
class MethodRequest:
    method: Method
    ks: tuple[float, ...] = ()

    @property
    def columns(self) -> list[str]:
        if self.method.takes_k:
            return [k_column(self.method.name, k) for k in self.ks]
        return [self.method.name]


def resolve_methods(names: Sequence[str], ks: Sequence[float] = DEFAULT_KS) -> list[MethodRequest]:
    """Parses method names: ``mink`` takes every k in ``ks``; ``mink_0.2`` takes just 0.2."""
    ks = tuple(_check_k(k) for k in ks)
    requested: dict[str, list[float]] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in REGISTRY:
            requested.setdefault(name, []).extend(ks if REGISTRY[name].takes_k else [])
            continue
        family, _, k_text = name.rpartition("_")
        if family in REGISTRY and REGISTRY[family].takes_k:
            try:
                k = float(k_text)
            except ValueError:
                raise MiaFastError(f"bad k in method {name!r}: {k_text!r} is not a number") from None
            requested.setdefault(family, []).append(_check_k(k))
            continue
        raise MiaFastError(f"unknown method {name!r}; known methods: {', '.join(sorted(REGISTRY))}")
    if not requested:
        raise MiaFastError("no method given")
    return [
        MethodRequest(REGISTRY[name], tuple(dict.fromkeys(k_list)))
        for name, k_list in requested.items()
    ]


def _check_k(k: float) -> float:
    if not 0.0 < k <= 1.0:
        raise MiaFastError(f"k must be a fraction in (0, 1], got {k}")
    return float(k)


def needs_of(requests: Sequence[MethodRequest]) -> frozenset[str]:
    return frozenset().union(*(r.method.needs for r in requests))


def score(inputs: ScoringInputs, requests: Sequence[MethodRequest]) -> dict[str, np.ndarray]:
    """Runs each requested method; returns one float64 column per score, in request order."""
    columns: dict[str, np.ndarray] = {}
    for request in requests:
        missing = [need for need in request.method.needs if not _has(inputs, need)]
        if missing:
            raise MiaFastError(f"method {request.method.name!r} needs {', '.join(missing)}")
        if request.method.takes_k:
            values = request.method.fn(inputs, request.ks)
            for j, column in enumerate(request.columns):
                columns[column] = values[:, j]
        else:
            columns[request.method.name] = request.method.fn(inputs)
    return columns


def _has(inputs: ScoringInputs, need: str) -> bool:
    source = {
        NEEDS_TEXT: inputs.texts,
        NEEDS_LOWERCASE: inputs.lowercase_stats,
        NEEDS_REFERENCE: inputs.reference_stats,
        NEEDS_FREQUENCIES: inputs.log_frequencies,
    }[need]
    return source is not None


def mean_loss(stats: TokenStats) -> np.ndarray:
    return -segment_mean(stats.logp, stats.offsets)


# ---- the methods ----


@register("loss")
def loss_score(inputs: ScoringInputs) -> np.ndarray:
    """-loss: the mean log-likelihood of the scored tokens."""
    return -mean_loss(inputs.stats)


@register("zlib", needs=[NEEDS_TEXT])
def zlib_score(inputs: ScoringInputs) -> np.ndarray:
    """-loss / zlib-compressed length of the UTF-8 text (nats per compressed byte)."""
    compressed = np.array([len(zlib.compress(t.encode("utf-8"))) for t in inputs.texts], dtype=np.float64)
    return -mean_loss(inputs.stats) / compressed


@register("lowercase", needs=[NEEDS_LOWERCASE])
def lowercase_score(inputs: ScoringInputs) -> np.ndarray:
    """loss(lowercased text) / loss(text)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return mean_loss(inputs.lowercase_stats) / mean_loss(inputs.stats)


@register("ref", needs=[NEEDS_REFERENCE])
def reference_score(inputs: ScoringInputs) -> np.ndarray:
    """loss under the reference model (its own tokenizer) minus loss under the target model."""
    return mean_loss(inputs.reference_stats) - mean_loss(inputs.stats)


@register("mink", takes_k=True)
def mink_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """Min-K% Prob: mean of the k-fraction lowest token log-probabilities."""
    return inputs.reductions.bottom_k_means(inputs.stats.logp, inputs.stats.offsets, ks)


@register("minkpp", takes_k=True)
def minkpp_score(inputs: ScoringInputs, ks: Sequence[float]) -> np.ndarray:
    """Min-K%++: the same bottom-k mean over z = (logp - mu) / sqrt(var)."""
    stats = inputs.stats
    z = (stats.logp.astype(np.float64) - stats.mu) / np.sqrt(np.maximum(stats.var.astype(np.float64), VAR_FLOOR))
    return inputs.reductions.bottom_k_means(z, stats.offsets, ks)


@register("dcpdd", needs=[NEEDS_FREQUENCIES])
def dcpdd_score(inputs: ScoringInputs) -> np.ndarray:
    """DC-PDD: mean over first occurrences of min(p(x_t) * -ln f(x_t), a)."""
    return inputs.reductions.capped_first_occurrence_mean(inputs.stats, inputs.log_frequencies, inputs.a)
