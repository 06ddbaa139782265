"""What Python may import from a mia-fast checkout: from its root, ``mia_fast`` and no other package; from a folder
of it that a script or pytest put on ``sys.path`` (``benchmarks/``, ``scripts/``, ``tests/``), only names that no
installed module has.

Why: Python puts the working directory on ``sys.path`` for ``python -c``, ``python -m``, a REPL and a notebook,
and a script's own folder for ``python benchmarks/x.py``. The checkout's ``kernels/`` (shipped as
``mia_fast.kernels``) and ``benchmarks/kernels.py`` are then found as ``kernels`` before Hugging Face's package
of that name, which transformers imports, and every other folder (``tests``, ``scripts``, ...) is importable as a
namespace package. A path hook (sys.path_hooks) decides per ``sys.path`` entry, so the rule holds whatever put
the entry there. :func:`install` runs at every interpreter start of an environment mia-fast is installed in, from
the ``mia_fast_checkout_imports.pth`` file the install puts in site-packages; it imports nothing but the standard
library, since every Python process of that environment runs it.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    ModuleSpec,
    PathFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from types import ModuleType

PACKAGE = "mia_fast"
_LOADERS = (
    (ExtensionFileLoader, EXTENSION_SUFFIXES),
    (SourceFileLoader, SOURCE_SUFFIXES),
    (SourcelessFileLoader, BYTECODE_SUFFIXES),
)


def is_checkout(directory: str) -> bool:
    """A mia-fast source tree: the package's folder beside the project file (site-packages has no project file)."""
    return os.path.isfile(os.path.join(directory, PACKAGE, "__init__.py")) and os.path.isfile(
        os.path.join(directory, "pyproject.toml")
    )


def _in_checkout(entry: str) -> bool:
    directory = os.path.abspath(entry or os.curdir)
    return is_checkout(directory) or is_checkout(os.path.dirname(directory))


def _is_real_module(spec: ModuleSpec | None) -> bool:
    """A module or a regular package; a namespace portion (a plain folder of that name) is no module to shadow."""
    return spec is not None and spec.origin not in (None, "namespace")


class _CheckoutEntryFinder:
    """The standard finder of one sys.path entry, which the subclasses narrow in ``find_spec``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._files = FileFinder(path, *_LOADERS)

    def invalidate_caches(self) -> None:
        self._files.invalidate_caches()


class CheckoutRootFinder(_CheckoutEntryFinder):
    """The sys.path entry finder of a checkout's root: its folders are no packages, except ``mia_fast``."""

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        spec = self._files.find_spec(fullname, target)
        if spec is not None and spec.submodule_search_locations is not None and fullname != PACKAGE:
            return None
        return spec


class CheckoutFolderFinder(_CheckoutEntryFinder):
    """The sys.path entry finder of a folder of a checkout (``benchmarks/`` for its scripts, ``tests/`` for pytest):
    a top-level name found here is given only where no entry outside the checkout has a module of that name."""

    def find_spec(self, fullname: str, target: ModuleType | None = None) -> ModuleSpec | None:
        spec = self._files.find_spec(fullname, target)
        if spec is None or "." in fullname:
            return spec
        elsewhere = [entry for entry in sys.path if isinstance(entry, str) and not _in_checkout(entry)]
        return None if _is_real_module(PathFinder.find_spec(fullname, elsewhere)) else spec


def checkout_path_hook(entry: str) -> CheckoutRootFinder | CheckoutFolderFinder:
    """A sys.path hook: the finder of an entry in a checkout; ImportError (the hook protocol's "not mine") else."""
    directory = os.path.abspath(entry or os.curdir)
    if is_checkout(directory):
        return CheckoutRootFinder(entry)
    if os.path.isdir(directory) and is_checkout(os.path.dirname(directory)):
        return CheckoutFolderFinder(entry)
    raise ImportError(f"{entry!r} is not in a mia-fast checkout")


def install() -> None:
    """Puts the hook first in ``sys.path_hooks`` (once) and forgets the finders already made for checkout entries."""
    if checkout_path_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, checkout_path_hook)
    for entry in [entry for entry in sys.path_importer_cache if isinstance(entry, str) and _in_checkout(entry)]:
        del sys.path_importer_cache[entry]
