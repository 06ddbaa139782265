"""The method registry: a method is a small pure function from pass results to one score per text.

Every score is oriented so that higher means more likely a member (DESIGN §2). A method declares
the passes it reads (a function of the method options, e.g. ReCaLL's prefix; by default the plain
target pass) and the other inputs it reads (the texts, a frequency table, prefix texts, a probe). A method that
takes k computes all requested k at once and returns one column per k, named ``{name}_{k}``.
Adding a method touches its own module only: write the function and decorate it with ``register``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mia_fast.errors import MiaFastError
from mia_fast.pipeline.passes import PLAIN, REFERENCE, TARGET, Pass
from mia_fast.pipeline.stats import TokenStats

DEFAULT_METHODS: tuple[str, ...] = ("loss", "zlib", "mink", "minkpp")
DEFAULT_KS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DEFAULT_A = 0.01
DEFAULT_GAMMA = 0.5
DEFAULT_SAMIA_SAMPLES = 10
DEFAULT_PAC_COPIES = 5
DEFAULT_GRADNORM_NORM = math.inf
GRADNORM_NORMS = (1.0, 2.0, math.inf)

# What a method may declare it needs beyond the results of its passes.
NEEDS_TEXT = "text"
NEEDS_FREQUENCIES = "frequencies"
NEEDS_NONMEMBER_PREFIX = "nonmember prefix"
NEEDS_MEMBER_PREFIX = "member prefix"
NEEDS_PROBE = "probe"
NEEDS_NEIGHBORS = "neighbors"

# How a user supplies a need or a model a pass runs on, for the error that says it is missing.
_SUPPLY = {
    NEEDS_FREQUENCIES: "a token frequency table (--freq-table; build one with 'mia-fast freq build')",
    NEEDS_NONMEMBER_PREFIX: "known non-member texts for its prefix (--prefix-nonmembers FILE)",
    NEEDS_MEMBER_PREFIX: "known member texts for its prefix (--prefix-members FILE)",
    NEEDS_NEIGHBORS: "the neighbour texts of every scored text (--neighbor-field FIELD, a list of texts per row, or --neighbor-model M)",
    NEEDS_PROBE: "a trained probe (--probe PROBE_DIR; train one with 'mia-fast probe train')",
    REFERENCE: "a reference model (--ref-model)",
}


@dataclass(frozen=True)
class MethodOptions:
    """Settings of the methods: DC-PDD's cap, the known non-member (ReCaLL, Con-ReCall) and member
    (Con-ReCall) texts put before each text, Con-ReCall's γ, the trained probe (a
    ``mia_fast.methods.probe.Probe``), the neighbour texts (a ``mia_fast.pipeline.neighbors.NeighborSource``),
    SaMIA's samples per text, PAC's augmented copies per text, the gradient norm's order and parameter
    name patterns, and the seed of SaMIA's sampling and PAC's word swaps."""

    a: float = DEFAULT_A
    prefix_nonmembers: tuple[str, ...] = ()
    prefix_members: tuple[str, ...] = ()
    gamma: float = DEFAULT_GAMMA
    probe: Any = None
    neighbors: Any = None
    samia_samples: int = DEFAULT_SAMIA_SAMPLES
    pac_copies: int = DEFAULT_PAC_COPIES
    gradnorm_norm: float = DEFAULT_GRADNORM_NORM
    gradnorm_params: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if not math.isfinite(self.gamma):
            raise MiaFastError(f"Con-ReCall's gamma must be a finite number, got {self.gamma}")
        for name in ("samia_samples", "pac_copies"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise MiaFastError(f"{name} must be a positive whole number, got {getattr(self, name)!r}")
        if self.gradnorm_norm not in GRADNORM_NORMS:
            raise MiaFastError(f"the gradient norm's order must be 1, 2 or inf, got {self.gradnorm_norm}")


@dataclass(frozen=True)
class ScoringInputs:
    """Everything a method may read: the plain pass's TokenStats, the results of the other passes,
    and what methods declared they need. Fields stay empty unless some method declared the need."""

    stats: TokenStats | None
    passes: Mapping[Pass, Any] = field(default_factory=dict)
    texts: Sequence[str] | None = None
    log_frequencies: np.ndarray | None = None  # ln f(v) for every id v of the target vocabulary
    options: MethodOptions = MethodOptions()
    impl: str = "torch"  # the per-text reductions: numpy reference or Triton kernels
    device: Any = None  # where the kernels run

    def of(self, needed: Pass) -> Any:
        """The result of a pass: TokenStats, or hidden states for a hidden-state readout."""
        return self.stats if needed == PLAIN else self.passes[needed]

    def has(self, needed: Pass) -> bool:
        return self.stats is not None if needed == PLAIN else needed in self.passes


def _plain(options: MethodOptions) -> tuple[Pass, ...]:
    return (PLAIN,)


def _never(options: MethodOptions) -> bool:
    return False


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[..., np.ndarray]
    passes: Callable[[MethodOptions], Sequence[Pass]] = _plain
    needs: frozenset[str] = field(default_factory=frozenset)
    takes_k: bool = False
    # True when a text's score depends on the other texts scored with it (statistics over them all).
    pooled: Callable[[MethodOptions], bool] = _never


REGISTRY: dict[str, Method] = {}


def register(
    name: str,
    needs: Sequence[str] = (),
    takes_k: bool = False,
    passes: Callable[[MethodOptions], Sequence[Pass]] = _plain,
    pooled: Callable[[MethodOptions], bool] = _never,
) -> Callable:
    """Registers ``fn(inputs)`` (or ``fn(inputs, ks)`` with ``takes_k``) under ``name``; ``passes``
    gives the passes it reads (default: the plain target pass); ``pooled`` says whether its scores
    depend on which texts are scored together (then a file is scored in one block)."""

    def decorate(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        REGISTRY[name] = Method(name, fn, passes, frozenset(needs), takes_k, pooled)
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
    return [MethodRequest(REGISTRY[name], tuple(dict.fromkeys(k_list))) for name, k_list in requested.items()]


def _check_k(k: float) -> float:
    if not 0.0 < k <= 1.0:
        raise MiaFastError(f"k must be a fraction in (0, 1], got {k}")
    return float(k)


def needs_of(requests: Sequence[MethodRequest]) -> frozenset[str]:
    return frozenset().union(*(r.method.needs for r in requests))


def passes_of(requests: Sequence[MethodRequest], options: MethodOptions) -> list[Pass]:
    """Every pass the requested methods declare, each once, in order."""
    return list(dict.fromkeys(p for r in requests for p in r.method.passes(options)))


def check_available(
    requests: Sequence[MethodRequest], options: MethodOptions, *, models: Sequence[str], has_frequencies: bool
) -> None:
    """Refuses methods whose models or inputs were not supplied, naming how to supply them."""
    available = {TARGET, *models}
    if has_frequencies:
        available.add(NEEDS_FREQUENCIES)
    if options.prefix_nonmembers:
        available.add(NEEDS_NONMEMBER_PREFIX)
    if options.prefix_members:
        available.add(NEEDS_MEMBER_PREFIX)
    if options.probe is not None:
        available.add(NEEDS_PROBE)
    if options.neighbors is not None:
        available.add(NEEDS_NEIGHBORS)
    for request in requests:
        wanted = [
            *(p.model for p in request.method.passes(options)),
            *(n for n in request.method.needs if n != NEEDS_TEXT),
        ]
        for need in wanted:
            if need not in available:
                raise MiaFastError(f"method {request.method.name!r} needs {_SUPPLY.get(need, need)}")


def score(inputs: ScoringInputs, requests: Sequence[MethodRequest]) -> dict[str, np.ndarray]:
    """Runs each requested method; returns one float64 column per score, in request order."""
    columns: dict[str, np.ndarray] = {}
    for request in requests:
        missing = [need for need in sorted(request.method.needs) if not _has(inputs, need)]
        missing += [f"the pass {p}" for p in request.method.passes(inputs.options) if not inputs.has(p)]
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
        NEEDS_FREQUENCIES: inputs.log_frequencies,
        NEEDS_NONMEMBER_PREFIX: inputs.options.prefix_nonmembers or None,
        NEEDS_MEMBER_PREFIX: inputs.options.prefix_members or None,
        NEEDS_PROBE: inputs.options.probe,
        NEEDS_NEIGHBORS: inputs.options.neighbors,
    }[need]
    return source is not None


def mean_loss(stats: TokenStats) -> np.ndarray:
    """Mean negative log-likelihood of each text's scored tokens (NaN for a text with none)."""
    return -stats.mean_logp
