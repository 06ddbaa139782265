"""The methods' settings of a command from its parsed flags: flat values keyed by setting key, made into one settings
object per class that a flag was given for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mia_fast.methods.registry import REGISTRY, Method
from mia_fast.methods.settings import MethodSettings, setting_fields, settings_classes_of


def settings_from_values(values: Mapping[str, Any], methods: Iterable[Method] | None = None) -> MethodSettings:
    """The settings of ``methods`` (default: every registered one) from flat values keyed by setting key
    (``samia_samples``, ``prefix_nonmembers``: a flag with underscores); a value of None is the field's
    default. A class none of whose values is given is left at its defaults."""
    methods = list(REGISTRY.values() if methods is None else methods)
    built = []
    for cls in settings_classes_of(methods):
        given = {f.name: values[f.key] for f in setting_fields(cls) if values.get(f.key) is not None}
        if given:
            built.append(cls(**given))
    return MethodSettings(*built)
