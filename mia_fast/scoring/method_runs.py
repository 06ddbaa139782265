"""Running the registered methods: their settings made ready for the target model, what they need checked before a
run (the settings a method requires given, the models its passes run on held), the hooks their settings declare
called on the texts, the passes and calibration texts they read, and their scores over a block's ScoringInputs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mia_fast.engines.passes import TARGET, Pass
from mia_fast.errors import MiaFastError
from mia_fast.methods.derived import model_supply
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import Method, MethodRequest
from mia_fast.methods.settings import (
    ChecksTexts,
    GivesExample,
    MethodSettings,
    PreparesForModel,
    PreparesForTexts,
    is_empty,
    setting_fields,
    settings_classes_of,
)

# What a caller gives as the methods' settings: a MethodSettings, settings objects, or None (every default).
Settings = MethodSettings | Iterable[object] | None


def prepare_settings(settings: Settings, model: Any, *, onto: MethodSettings | None = None) -> MethodSettings:
    """``settings`` (put in place of ``onto``'s objects of their classes, where given) with each object made ready by
    its own ``prepare(model)`` (:class:`PreparesForModel`: a probe loaded and checked against the model, a frequency
    table mapped onto its vocabulary); ``model`` is the target's LoadedModel, or None before one is loaded (then only
    what needs no model is done). ``onto`` itself, ready already, is returned when ``settings`` give nothing."""
    given = tuple(settings or ())
    if onto is not None and not given:
        return onto
    replaced = {type(value) for value in given}
    values = [*(value for value in onto or () if type(value) not in replaced), *given]
    return MethodSettings(*(v.prepare(model) if isinstance(v, PreparesForModel) else v for v in values))


def example_settings(methods: Iterable[Method], model: Any) -> MethodSettings:
    """Settings that ``methods`` run with on ``model`` (a LoadedModel), for a quick check: each settings class's own
    ``example(model)`` where it declares one (:class:`GivesExample`; a class with a required value must), its defaults
    otherwise. They run; they are small (few samples, a short fine-tuning), not tuned to detect anything."""
    classes = settings_classes_of(methods)
    return MethodSettings(*(cls.example(model) for cls in classes if issubclass(cls, GivesExample)))


def _read_settings(settings: MethodSettings, requests: Sequence[MethodRequest]) -> list[Any]:
    """The settings object of each class the requested methods read, each class once, in order (what
    ``settings_classes_of`` gives, read off the requests here)."""
    return [settings.of(cls) for cls in dict.fromkeys(c for r in requests for c in r.method.settings)]


def check_texts(settings: MethodSettings, requests: Sequence[MethodRequest], texts: Sequence[str]) -> None:
    """Each settings object of the requested methods that checks texts (:class:`ChecksTexts`) refuses what it must
    among ``texts`` before any is scored (e.g. one among its known prefix texts)."""
    for value in _read_settings(settings, requests):
        if isinstance(value, ChecksTexts):
            value.check_texts(texts)


def before_scoring(settings: MethodSettings, requests: Sequence[MethodRequest], texts: Sequence[str]) -> None:
    """Each settings object of the requested methods that prepares for texts (:class:`PreparesForTexts`) made ready
    for a block's ``texts`` (e.g. neighbours generated for them)."""
    for value in _read_settings(settings, requests):
        if isinstance(value, PreparesForTexts):
            value.before_scoring(texts)


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


def missing_settings(method: Method, settings: MethodSettings) -> list[str]:
    """How to supply each required setting of ``method`` that ``settings`` leave empty."""
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
        missing = missing_settings(request.method, settings)
        if not missing:
            missing = [model_supply(p.model) for p in request.method.passes(settings) if p.model not in available]
        if missing:
            raise MiaFastError(f"method {request.method.name!r} needs {missing[0]}")


def score(inputs: ScoringInputs, requests: Sequence[MethodRequest]) -> dict[str, np.ndarray]:
    """Runs each requested method; returns one float64 column per score, in request order."""
    columns: dict[str, np.ndarray] = {}
    for request in requests:
        missing = missing_settings(request.method, inputs.settings)
        missing += [f"the pass {p}" for p in request.method.passes(inputs.settings) if not inputs.has(p)]
        if tuple(request.method.calibration(inputs.settings)) not in {(), *inputs.calibration}:
            missing.append("its calibration texts run through its passes")
        if missing:
            raise MiaFastError(f"method {request.method.name!r} needs {', '.join(missing)}")
        columns.update(request.run(inputs))
    return columns
