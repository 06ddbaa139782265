"""The models a pass may run on besides the target: how a user supplies each (for the error that says it is missing),
and those that methods make from the target's weights (FSD's fine-tuned copy), declared by the method's module with
:func:`derive_model`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mia_fast.engines.passes import REFERENCE


@dataclass(frozen=True)
class DerivedModel:
    """A model that methods make from the target's weights (FSD's fine-tuned copy): ``make(target, value, log)``
    returns it (a LoadedModel) from the target's LoadedModel, ``value`` the run's object of ``settings``, ``log``
    taking a line of progress."""

    settings: type
    make: Callable[[Any, Any, Callable[[str], None]], Any]


# The models made from the target's weights, by the name their passes give (``Pass(model=...)``).
DERIVED_MODELS: dict[str, DerivedModel] = {}
# How a user supplies a model a pass runs on, by its name, for the error that says it is missing.
MODEL_SUPPLY: dict[str, str] = {REFERENCE: "a reference model (--ref-model)"}


def derive_model(
    model: str, settings: type, make: Callable[[Any, Any, Callable[[str], None]], Any], supply: str
) -> None:
    """Declares the model of the passes named ``model`` as made from the target's weights by ``make`` (see
    :class:`DerivedModel`); ``supply`` says what it needs, for the error where the target's weights are not here (a
    served model, a stats cache)."""
    DERIVED_MODELS[model] = DerivedModel(settings, make)
    MODEL_SUPPLY[model] = supply


def model_supply(model: str) -> str:
    """How a user supplies the model of the passes named ``model``."""
    return MODEL_SUPPLY.get(model, f"the {model} model")
