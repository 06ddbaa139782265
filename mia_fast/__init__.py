"""mia-fast: fast, exact pretraining-data detection.

The names below are imported on first use, so ``import mia_fast`` loads no torch, transformers or
triton until something needs them. Every settings class a registered method reads is a name here too
(``mia_fast.RecallSettings``), read from the method registry, so a method added as a module of its own is exported
with no line here; so are the registries a user extends (``ENGINES``, ``OUTPUT_FORMATS``, ``SUITES``).
"""

from __future__ import annotations

import importlib
from typing import Any

from mia_fast.errors import MiaFastError as MiaFastError  # the one name imported at once

# public name: (module, attribute in it; None for the module itself)
_EXPORTS = {
    "DEFAULT_KS": ("mia_fast.methods.registry", "DEFAULT_KS"),
    "DEFAULT_METHODS": ("mia_fast.methods.registry", "DEFAULT_METHODS"),
    "REGISTRY": ("mia_fast.methods", "REGISTRY"),
    "Detector": ("mia_fast.api", "Detector"),
    "Scores": ("mia_fast.api", "Scores"),
    "OnlineScores": ("mia_fast.api", "OnlineScores"),
    "OnlineSetting": ("mia_fast.methods.online", "OnlineSetting"),
    "score_file": ("mia_fast.api", "score_file"),
    "score_on_ray": ("mia_fast.cluster", "score_on_ray"),
    "build_on_ray": ("mia_fast.cluster", "build_on_ray"),
    "DataStream": ("mia_fast.data.files", "DataStream"),
    "Dataset": ("mia_fast.data.files", "Dataset"),
    "Fields": ("mia_fast.data.fields", "Fields"),
    "MethodSettings": ("mia_fast.methods", "MethodSettings"),
    "ModelConfig": ("mia_fast.api", "ModelConfig"),
    "DeviceMap": ("mia_fast.api", "DeviceMap"),
    "ServerConfig": ("mia_fast.served.client", "ServerConfig"),
    "RequestSettings": ("mia_fast.served.client", "RequestSettings"),
    "ENGINES": ("mia_fast.scoring.engines", "ENGINES"),
    "EngineKind": ("mia_fast.scoring.engines", "EngineKind"),
    "OUTPUT_FORMATS": ("mia_fast.data.formats", "OUTPUT_FORMATS"),
    "register_format": ("mia_fast.data.formats", "register_format"),
    "SUITES": ("mia_fast.data.suites", "SUITES"),
    "ComputeConfig": ("mia_fast.api", "ComputeConfig"),
    "ScoringConfig": ("mia_fast.api", "ScoringConfig"),
    "OutputConfig": ("mia_fast.api", "OutputConfig"),
    "RunConfig": ("mia_fast.api", "RunConfig"),
    "LogFrequencies": ("mia_fast.methods", "LogFrequencies"),
    "evaluate_file": ("mia_fast.evaluation.workflows", "evaluate_file"),
    "ScoringInputs": ("mia_fast.methods", "ScoringInputs"),
    "resolve_methods": ("mia_fast.methods", "resolve_methods"),
    "score_stats": ("mia_fast.scoring.method_runs", "score"),
    "Pass": ("mia_fast.engines.passes", "Pass"),
    "TokenStats": ("mia_fast.engines.stats", "TokenStats"),
    "LoadedModel": ("mia_fast.pipeline.models", "LoadedModel"),
    "load_model": ("mia_fast.pipeline.models", "load_model"),
    "FrequencyTable": ("mia_fast.frequency.table", "FrequencyTable"),
    "build_from_text": ("mia_fast.frequency.text_build", "build_from_text"),
    "build_from_tokens": ("mia_fast.frequency.token_files", "build_from_tokens"),
    "Counting": ("mia_fast.frequency.build", "Counting"),
    "CorpusFormat": ("mia_fast.frequency.corpus", "CorpusFormat"),
    "metrics": ("mia_fast.evaluation.metrics", None),
}


def settings_classes() -> dict[str, type]:
    """Every settings class a registered method reads, by its name, as the method registry lists them (importing the
    methods, though no torch)."""
    return importlib.import_module("mia_fast.methods").settings_by_name()


def _public_names() -> list[str]:
    return ["MiaFastError", *_EXPORTS, *settings_classes(), "settings_classes"]


def __getattr__(name: str) -> Any:
    # __all__ too is made on first use: the settings classes' names need the method registry.
    if name == "__all__":
        value = _public_names()
    elif name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = importlib.import_module(module)
        if attribute is not None:
            value = getattr(value, attribute)
    elif name.startswith("__") or name not in (found := settings_classes()):
        raise AttributeError(f"module 'mia_fast' has no attribute {name!r}")
    else:
        value = found[name]
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(globals().get("__all__") or __getattr__("__all__"))
