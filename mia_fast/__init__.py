"""mia-fast: fast, exact pretraining-data detection.

The names below are imported on first use, so ``import mia_fast`` loads no torch, transformers or
triton until something needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

from mia_fast.errors import MiaFastError

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
    "ServerConfig": ("mia_fast.served.client", "ServerConfig"),
    "RequestSettings": ("mia_fast.served.client", "RequestSettings"),
    "ComputeConfig": ("mia_fast.api", "ComputeConfig"),
    "ScoringConfig": ("mia_fast.api", "ScoringConfig"),
    "OutputConfig": ("mia_fast.api", "OutputConfig"),
    "RunConfig": ("mia_fast.api", "RunConfig"),
    "CamiaSettings": ("mia_fast.methods", "CamiaSettings"),
    "ConRecallSettings": ("mia_fast.methods", "ConRecallSettings"),
    "DcpddSettings": ("mia_fast.methods", "DcpddSettings"),
    "FsdSettings": ("mia_fast.methods", "FsdSettings"),
    "GapkSettings": ("mia_fast.methods", "GapkSettings"),
    "GradnormSettings": ("mia_fast.methods", "GradnormSettings"),
    "LogFrequencies": ("mia_fast.methods", "LogFrequencies"),
    "NeighborSettings": ("mia_fast.methods", "NeighborSettings"),
    "NgramCoverageSettings": ("mia_fast.methods", "NgramCoverageSettings"),
    "PacSettings": ("mia_fast.methods", "PacSettings"),
    "ProbeSettings": ("mia_fast.methods", "ProbeSettings"),
    "RecallSettings": ("mia_fast.methods", "RecallSettings"),
    "SamiaSettings": ("mia_fast.methods", "SamiaSettings"),
    "SurpSettings": ("mia_fast.methods", "SurpSettings"),
    "WbcSettings": ("mia_fast.methods", "WbcSettings"),
    "evaluate_file": ("mia_fast.evaluation.workflows", "evaluate_file"),
    "ScoringInputs": ("mia_fast.methods", "ScoringInputs"),
    "resolve_methods": ("mia_fast.methods", "resolve_methods"),
    "score_stats": ("mia_fast.methods", "score"),
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

__all__ = ["MiaFastError", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mia_fast' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
