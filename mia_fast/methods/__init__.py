"""Detection methods, one module per family; importing this package registers them all."""

from mia_fast.methods import (  # noqa: F401  (registration)
    conrecall,
    dcpdd,
    gradnorm,
    likelihood,
    lowercase,
    mink,
    neighbor,
    pac,
    probe,
    recall,
    reference,
    samia,
)
from mia_fast.methods.registry import (
    DEFAULT_A,
    DEFAULT_KS,
    DEFAULT_METHODS,
    REGISTRY,
    MethodOptions,
    MethodRequest,
    ScoringInputs,
    resolve_methods,
    score,
)

__all__ = [
    "DEFAULT_A",
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "REGISTRY",
    "MethodOptions",
    "MethodRequest",
    "ScoringInputs",
    "resolve_methods",
    "score",
]
