"""mia-fast: fast, exact pretraining-data detection."""

from mia_fast import metrics
from mia_fast.api import DEFAULT_METHODS, Detector, Scores
from mia_fast.errors import MiaFastError
from mia_fast.freq import FrequencyTable
from mia_fast.methods import DEFAULT_KS, REGISTRY, ScoringInputs, resolve_methods
from mia_fast.methods import score as score_stats
from mia_fast.models import LoadedModel, load_model
from mia_fast.stats import TokenStats

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "REGISTRY",
    "Detector",
    "FrequencyTable",
    "LoadedModel",
    "MiaFastError",
    "Scores",
    "ScoringInputs",
    "TokenStats",
    "load_model",
    "metrics",
    "resolve_methods",
    "score_stats",
]
