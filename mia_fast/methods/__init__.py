"""Detection methods, one module per family; importing this package registers them all."""

from mia_fast.methods import (  # noqa: F401  (registration)
    camia,
    conrecall,
    dcpdd,
    ezmia,
    fsd,
    gapk,
    gradnorm,
    likelihood,
    lowercase,
    mink,
    minkpp_top,
    neighbor,
    ngram_coverage,
    pac,
    probe,
    recall,
    reference,
    samia,
    surp,
    wbc,
)
from mia_fast.methods.camia import CamiaSettings
from mia_fast.methods.conrecall import ConRecallSettings
from mia_fast.methods.dcpdd import DcpddSettings, LogFrequencies
from mia_fast.methods.fsd import FsdSettings
from mia_fast.methods.gapk import GapkSettings
from mia_fast.methods.gradnorm import GradnormSettings
from mia_fast.methods.neighbor import NeighborSettings
from mia_fast.methods.ngram_coverage import NgramCoverageSettings
from mia_fast.methods.pac import PacSettings
from mia_fast.methods.probe import ProbeSettings
from mia_fast.methods.recall import RecallSettings
from mia_fast.methods.registry import (
    DEFAULT_KS,
    DEFAULT_METHODS,
    REGISTRY,
    MethodRequest,
    ScoringInputs,
    register,
    resolve_methods,
    score,
)
from mia_fast.methods.samia import SamiaSettings
from mia_fast.methods.settings import Flag, MethodSettings, setting
from mia_fast.methods.surp import SurpSettings
from mia_fast.methods.wbc import WbcSettings

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "REGISTRY",
    "CamiaSettings",
    "ConRecallSettings",
    "DcpddSettings",
    "Flag",
    "FsdSettings",
    "GapkSettings",
    "GradnormSettings",
    "LogFrequencies",
    "MethodRequest",
    "MethodSettings",
    "NeighborSettings",
    "NgramCoverageSettings",
    "PacSettings",
    "ProbeSettings",
    "RecallSettings",
    "SamiaSettings",
    "SurpSettings",
    "ScoringInputs",
    "WbcSettings",
    "register",
    "resolve_methods",
    "score",
    "setting",
]
