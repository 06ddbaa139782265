"""Detection methods, one module per family. Importing this package imports every module of its folder, in name order
(:mod:`pkgutil`), and a method module registers its methods as it is imported (``registry.register``): a method
added as a module of its own is found with no line anywhere else. Modules that register nothing are harmless to
import; they are the methods' machinery:

- ``registry``: the registry: methods registered, their names resolved into requests;
- ``settings``: how a method declares its settings (fields, flags, ranges, the hooks' protocols), a run's
  ``MethodSettings`` and the settings recorded with a run;
- ``setting_options``: the settings' options, one per flag (the CLI's, the methods page's);
- ``derived``: the models a pass may run on besides the target, and those made from the target's weights;
- ``inputs``: what a method reads (``ScoringInputs``);
- ``catalogue``: the methods page of the docs, generated from the registry (``python -m mia_fast.methods.catalogue``;
  never imported with the package, as it runs as a script);
- ``reference_tokens``: the target's and the reference model's log-probabilities of the same tokens, for ``ezmia``
  and ``wbc``;
- ``online``: the token-level methods' scores on every window of a long text.

Every settings class a registered method reads is a name of this package too (``from mia_fast.methods import
SamiaSettings``), as is each name below.
"""

import importlib
import pkgutil

from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.registry import DEFAULT_KS, DEFAULT_METHODS, REGISTRY, MethodRequest, register, resolve_methods
from mia_fast.methods.settings import Flag, MethodSettings, setting, settings_classes_of

# Run with ``python -m``: a module imported before runpy runs it as __main__ gets a warning.
_SCRIPTS = {"catalogue"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _SCRIPTS:
        importlib.import_module(f"{__name__}.{_module.name}")

# What DcpddSettings.frequencies holds once mapped onto the model's vocabulary (users give it from Python too).
from mia_fast.methods.dcpdd import LogFrequencies  # noqa: E402  (after the others: modules register in name order)


def settings_by_name() -> dict[str, type]:
    """Every settings class a registered method reads, by its name, as the registry holds them now."""
    return {cls.__name__: cls for cls in settings_classes_of(REGISTRY.values())}


_SETTINGS = settings_by_name()
globals().update(_SETTINGS)

__all__ = [
    "DEFAULT_KS",
    "DEFAULT_METHODS",
    "REGISTRY",
    "Flag",
    "LogFrequencies",
    "MethodRequest",
    "MethodSettings",
    "ScoringInputs",
    "register",
    "resolve_methods",
    "setting",
    *sorted(_SETTINGS),
]
