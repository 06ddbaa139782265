"""Detection methods, one module per family; importing this package registers them all."""

from mia_fast.methods import (  # noqa: F401  (registration)
    conrecall,
    dcpdd,
    gradnorm,
    likelihood,
    lowercase,
    mink,
    minkpp_top,
    neighbor,
    pac,
    probe,
    recall,
    reference,
    samia,
)
from mia_fast.methods.conrecall import ConRecallSettings
from mia_fast.methods.dcpdd import DcpddSettings, LogFrequencies
from mia_fast.methods.gradnorm import GradnormSettings
from mia_fast.methods.neighbor import NeighborSettings
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

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "REGISTRY",
    "ConRecallSettings",
    "DcpddSettings",
    "Flag",
    "GradnormSettings",
    "LogFrequencies",
    "MethodRequest",
    "MethodSettings",
    "NeighborSettings",
    "PacSettings",
    "ProbeSettings",
    "RecallSettings",
    "SamiaSettings",
    "ScoringInputs",
    "register",
    "resolve_methods",
    "score",
    "setting",
]
