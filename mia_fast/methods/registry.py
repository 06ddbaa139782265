"""The method registry: registering methods and resolving their names, and nothing else.

A method is a small pure function from pass results to one score per text, every score oriented so that higher means
more likely a member (DESIGN §2). It declares the passes it reads (a function of the run's settings, e.g. ReCaLL's
prefix; by default the plain target pass) and the settings classes it reads (``mia_fast.methods.settings``). A method
that takes k computes all requested k at once and returns one column per k, named ``{name}_{k}``. Adding a method
touches its own module only: write its settings class and its function, and decorate the function with ``register``;
importing the package imports every module of its folder (``mia_fast/methods/__init__.py``), so the module registers
with no line elsewhere.

Here: :class:`Method` and :data:`REGISTRY`, filled by :func:`register`; the default methods and k; names resolved into
:class:`MethodRequest` objects (:func:`resolve_methods`), each of which runs its method's function
(:meth:`MethodRequest.run`, unchecked: ``mia_fast.scoring.method_runs`` checks what it needs first); the score
columns' names (:func:`k_column`, :func:`column_method`, :func:`log_likelihood_column`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mia_fast.engines.passes import PLAIN, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.settings import MethodSettings, setting_fields

DEFAULT_METHODS: tuple[str, ...] = ("loss", "zlib", "mink", "minkpp")
# The controlled experiment's (``mia-fast demo``): the defaults, the lowercase ratio and the reference ratio (the
# untouched model is its reference), each of which needs nothing but the model.
DEMO_METHODS: tuple[str, ...] = (*DEFAULT_METHODS, "lowercase", "ref")
DEFAULT_KS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

# The methods whose score is a mean log-probability of the text's tokens under the target, times a positive factor
# of the text alone (``register(log_likelihood=True)``): the ratio of two models' scores compares their likelihoods.
LOG_LIKELIHOODS: set[str] = set()


def _plain(settings: MethodSettings) -> tuple[Pass, ...]:
    return (PLAIN,)


def _never(settings: MethodSettings) -> bool:
    return False


def _no_texts(settings: MethodSettings) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[..., np.ndarray]
    passes: Callable[[MethodSettings], Sequence[Pass]] = _plain
    settings: tuple[type, ...] = ()
    takes_k: bool = False
    # True when a text's score depends on the other texts scored with it (statistics over them all).
    pooled: Callable[[MethodSettings], bool] = _never
    # True when it reads the exact mean and variance of log p over the vocabulary (no server gives them).
    vocabulary: bool = False
    # Known texts each scored text is compared with (e.g. CAMIA's non-members), run through the method's passes.
    calibration: Callable[[MethodSettings], tuple[str, ...]] = _no_texts

    @property
    def summary(self) -> str:
        """The first line of the function's docstring: the method's line in the docs."""
        return (self.fn.__doc__ or "").strip().split("\n")[0]


REGISTRY: dict[str, Method] = {}


def register(
    name: str,
    *,
    settings: Sequence[type] = (),
    takes_k: bool = False,
    passes: Callable[[MethodSettings], Sequence[Pass]] = _plain,
    pooled: Callable[[MethodSettings], bool] = _never,
    vocabulary: bool = False,
    calibration: Callable[[MethodSettings], tuple[str, ...]] = _no_texts,
    log_likelihood: bool = False,
) -> Callable:
    """Registers ``fn(inputs)`` (or ``fn(inputs, ks)`` with ``takes_k``) under ``name``; ``settings`` are the
    settings classes it reads, ``passes`` gives the passes it reads (default: the plain target pass);
    ``pooled`` says whether its scores depend on which texts are scored together (then a file is scored in
    one block); ``vocabulary`` that it reads the plain pass's exact vocabulary mean and variance; ``calibration``
    gives known texts it compares each scored text with, which the detector runs through the same passes, once,
    and hands it as ``inputs.calibration[texts]``; ``log_likelihood`` that its score is a mean log-probability of
    the text's tokens under the target, times a positive factor of the text alone (see :data:`LOG_LIKELIHOODS`).
    The function's docstring's first line is the method's summary in the docs."""
    for cls in settings:
        setting_fields(cls)

    def decorate(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        REGISTRY[name] = Method(name, fn, passes, tuple(settings), takes_k, pooled, vocabulary, calibration)
        if log_likelihood:
            LOG_LIKELIHOODS.add(name)
        return fn

    return decorate


def column_method(column: str) -> Method | None:
    """The method that writes a score column (``mink_0.2`` is mink's), or None."""
    if column in REGISTRY:
        return REGISTRY[column]
    method = REGISTRY.get(column.rpartition("_")[0])
    return method if method is not None and method.takes_k else None


def log_likelihood_column(column: str) -> bool:
    """Whether a score column is a mean log-probability under the target up to a positive factor of the text
    alone, so that two models' scores of a text compare by their ratio."""
    method = column_method(column)
    return method is not None and method.name in LOG_LIKELIHOODS


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

    def run(self, inputs: ScoringInputs) -> dict[str, np.ndarray]:
        """The method's columns over ``inputs`` (one per k of a k-method), unchecked: the caller checks first that
        ``inputs`` hold what it needs (``mia_fast.scoring.method_runs.score``)."""
        if not self.method.takes_k:
            return {self.method.name: self.method.fn(inputs)}
        values = self.method.fn(inputs, self.ks)
        return {column: values[:, j] for j, column in enumerate(self.columns)}


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
        raise MiaFastError(f"no method given; known methods: {', '.join(sorted(REGISTRY))}")
    return [MethodRequest(REGISTRY[name], tuple(dict.fromkeys(k_list))) for name, k_list in requested.items()]


def _check_k(k: float) -> float:
    if not 0.0 < k <= 1.0:
        raise MiaFastError(f"k must be a fraction in (0, 1], got {k}")
    return float(k)
