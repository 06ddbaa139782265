"""The method registry: a method is a small pure function from pass results to one score per text.

Every score is oriented so that higher means more likely a member (DESIGN §2). A method declares the passes
it reads (a function of the run's settings, e.g. ReCaLL's prefix; by default the plain target pass) and the
settings classes it reads (``mia_fast.methods.settings``). A method that takes k computes all requested k at
once and returns one column per k, named ``{name}_{k}``. Adding a method touches its own module only: write
its settings class and its function, and decorate the function with ``register``; importing the package imports
every module of its folder (``mia_fast/methods/__init__.py``), so the module registers with no line elsewhere.

From the settings declarations the registry derives everything around a method: the CLI flags
(:func:`setting_options`), the settings of a run from flat values (:func:`settings_from_values`), the check
that what a method needs was supplied (:func:`check_available`), the settings recorded with a run
(:func:`recorded_settings`) and settings any model runs it with for a quick check (:func:`example_settings`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mia_fast.engines.passes import PLAIN, REFERENCE, TARGET, Pass
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.settings import (
    Flag,
    MethodSettings,
    SettingField,
    SettingSpec,
    is_empty,
    recorded,
    setting_fields,
)

DEFAULT_METHODS: tuple[str, ...] = ("loss", "zlib", "mink", "minkpp")
# The controlled experiment's (``mia-fast demo``): the defaults, the lowercase ratio and the reference ratio (the
# untouched model is its reference), each of which needs nothing but the model.
DEMO_METHODS: tuple[str, ...] = (*DEFAULT_METHODS, "lowercase", "ref")
DEFAULT_KS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

# The methods whose score is a mean log-probability of the text's tokens under the target, times a positive factor
# of the text alone (``register(log_likelihood=True)``): the ratio of two models' scores compares their likelihoods.
LOG_LIKELIHOODS: set[str] = set()
# How a user supplies a model a pass runs on, for the error that says it is missing.
_MODEL_SUPPLY = {REFERENCE: "a reference model (--ref-model)"}


@dataclass(frozen=True)
class DerivedModel:
    """A model that methods make from the target's weights (FSD's fine-tuned copy): ``make(target, value, log)``
    returns it (a LoadedModel) from the target's LoadedModel, ``value`` the run's object of ``settings``, ``log``
    taking a line of progress."""

    settings: type
    make: Callable[[Any, Any, Callable[[str], None]], Any]


# The models made from the target's weights, by the name their passes give (``Pass(model=...)``).
DERIVED_MODELS: dict[str, DerivedModel] = {}


def derive_model(
    model: str, settings: type, make: Callable[[Any, Any, Callable[[str], None]], Any], supply: str
) -> None:
    """Declares the model of the passes named ``model`` as made from the target's weights by ``make`` (see
    :class:`DerivedModel`); ``supply`` says what it needs, for the error where the target's weights are not here (a
    served model, a stats cache)."""
    DERIVED_MODELS[model] = DerivedModel(settings, make)
    _MODEL_SUPPLY[model] = supply


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


def settings_classes(methods: Iterable[Method]) -> list[type]:
    """The settings classes these methods read, each once, in order."""
    return list(dict.fromkeys(cls for method in methods for cls in method.settings))


def passes_of(requests: Sequence[MethodRequest], settings: MethodSettings) -> list[Pass]:
    """Every pass the requested methods declare, each once, in order."""
    return list(dict.fromkeys(p for r in requests for p in r.method.passes(settings)))


def calibration_sets(requests: Sequence[MethodRequest], settings: MethodSettings) -> dict[tuple[str, ...], list[Pass]]:
    """Each distinct set of calibration texts of the requested methods, with every pass the methods reading it
    declare."""
    sets: dict[tuple[str, ...], list[Pass]] = {}
    for request in requests:
        texts = tuple(request.method.calibration(settings))
        if texts:
            passes = sets.setdefault(texts, [])
            passes.extend(p for p in request.method.passes(settings) if p not in passes)
    return sets


def pooled_methods(requests: Sequence[MethodRequest], settings: MethodSettings) -> list[str]:
    """The requested methods whose scores depend on which texts are scored together."""
    return [r.method.name for r in requests if r.method.pooled(settings)]


def _missing_settings(method: Method, settings: MethodSettings) -> list[str]:
    return [
        f.supply_text()
        for cls in method.settings
        for f in setting_fields(cls)
        if f.spec.required and is_empty(getattr(settings.of(cls), f.name))
    ]


def check_available(requests: Sequence[MethodRequest], settings: MethodSettings, models: Iterable[str]) -> None:
    """Refuses methods whose required settings are empty or whose models are not held, saying how to supply them."""
    available = {TARGET, *models}
    for request in requests:
        missing = _missing_settings(request.method, settings)
        if not missing:
            missing = [
                _MODEL_SUPPLY.get(p.model, f"the {p.model} model")
                for p in request.method.passes(settings)
                if p.model not in available
            ]
        if missing:
            raise MiaFastError(f"method {request.method.name!r} needs {missing[0]}")


def score(inputs: ScoringInputs, requests: Sequence[MethodRequest]) -> dict[str, np.ndarray]:
    """Runs each requested method; returns one float64 column per score, in request order."""
    columns: dict[str, np.ndarray] = {}
    for request in requests:
        missing = _missing_settings(request.method, inputs.settings)
        missing += [f"the pass {p}" for p in request.method.passes(inputs.settings) if not inputs.has(p)]
        if tuple(request.method.calibration(inputs.settings)) not in {(), *inputs.calibration}:
            missing.append("its calibration texts run through its passes")
        if missing:
            raise MiaFastError(f"method {request.method.name!r} needs {', '.join(missing)}")
        if request.method.takes_k:
            values = request.method.fn(inputs, request.ks)
            for j, column in enumerate(request.columns):
                columns[column] = values[:, j]
        else:
            columns[request.method.name] = request.method.fn(inputs)
    return columns


def prepare_settings(settings: MethodSettings, model: Any) -> MethodSettings:
    """Each given settings object made ready by its own ``prepare(model)`` where it has one (a probe loaded and
    checked against the model, a frequency table mapped onto its vocabulary); ``model`` is the target's
    LoadedModel, or None before one is loaded (then only what needs no model is done)."""
    return settings.map(lambda value: value.prepare(model) if hasattr(value, "prepare") else value)


def example_settings(methods: Iterable[Method], model: Any) -> MethodSettings:
    """Settings that ``methods`` run with on ``model`` (a LoadedModel), for a quick check: each settings class's own
    ``example(model)`` where it declares one (a class with a required value must), its defaults otherwise. They run;
    they are small (few samples, a short fine-tuning), not tuned to detect anything."""
    return MethodSettings(*(cls.example(model) for cls in settings_classes(methods) if hasattr(cls, "example")))


def call_settings_hook(
    settings: MethodSettings, requests: Sequence[MethodRequest], hook: str, texts: Sequence[str]
) -> None:
    """Calls ``hook(texts)`` on the settings of the requested methods that define it: ``check_texts`` before any
    text is scored (e.g. no prefix text among them), ``before_scoring`` on a block's texts (e.g. neighbours
    generated for them)."""
    for cls in settings_classes(r.method for r in requests):
        value = settings.of(cls)
        if hasattr(value, hook):
            getattr(value, hook)(texts)


@dataclass(frozen=True)
class SettingOption:
    """One CLI option for the settings fields that share its flag, and the methods that read them."""

    fields: tuple[SettingField, ...]
    methods: tuple[str, ...]

    @property
    def spec(self) -> SettingSpec:
        return self.fields[0].spec

    @property
    def flag(self) -> Flag:
        return self.fields[0].spec.flag

    @property
    def key(self) -> str:
        return self.fields[0].key

    @property
    def default(self) -> Any:
        return self.fields[0].default

    @property
    def help(self) -> str:
        default = self.default
        shown = "" if is_empty(default) or isinstance(default, bool) else f" (default {default})"
        return f"for {', '.join(self.methods)}: {self.spec.help}{shown}"


def setting_options(methods: Iterable[Method] | None = None) -> list[SettingOption]:
    """The CLI options of the settings of ``methods`` (default: every registered method), one per flag, in
    registration order; refuses two fields that share a flag but disagree."""
    methods = list(REGISTRY.values() if methods is None else methods)
    by_flag: dict[str, list[SettingField]] = {}
    readers: dict[str, list[str]] = {}
    for method in methods:
        for cls in method.settings:
            for f in setting_fields(cls):
                if f.spec.flag is None:
                    continue
                name = f.spec.flag.name
                same = by_flag.setdefault(name, [])
                if same and (same[0].spec != f.spec or same[0].default != f.default):
                    raise MiaFastError(
                        f"--{name} is declared differently by {same[0].owner.__name__}.{same[0].name} and "
                        f"{cls.__name__}.{f.name}; fields sharing a flag must agree"
                    )
                if f not in same:
                    same.append(f)
                readers.setdefault(name, [])
                if method.name not in readers[name]:
                    readers[name].append(method.name)
    return [SettingOption(tuple(by_flag[flag]), tuple(readers[flag])) for flag in by_flag]


def settings_from_values(values: Mapping[str, Any], methods: Iterable[Method] | None = None) -> MethodSettings:
    """The settings of ``methods`` (default: every registered one) from flat values keyed by setting key
    (``samia_samples``, ``prefix_nonmembers``: a flag with underscores); a value of None is the field's
    default. A class none of whose values is given is left at its defaults."""
    methods = list(REGISTRY.values() if methods is None else methods)
    built = []
    for cls in settings_classes(methods):
        given = {f.name: values[f.key] for f in setting_fields(cls) if values.get(f.key) is not None}
        if given:
            built.append(cls(**given))
    return MethodSettings(*built)


def recorded_settings(methods: Iterable[Method], settings: MethodSettings) -> dict[str, Any]:
    """The settings that change the scores of ``methods``, as JSON by setting key: what a threshold, a resumed
    output or a Ray manifest records and compares."""
    return {
        f.key: recorded(getattr(settings.of(cls), f.name))
        for cls in settings_classes(methods)
        for f in setting_fields(cls)
        if f.spec.scores
    }


def mean_loss(stats: TokenStats) -> np.ndarray:
    """Mean negative log-likelihood of each text's scored tokens (NaN for a text with none)."""
    return -stats.mean_logp
