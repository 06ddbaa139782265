"""Method settings: each method module declares a frozen dataclass of its own settings, each field made with
:func:`setting`, which says what the field means, its command-line flag, whether it changes scores and whether
a method cannot run without it. The registry derives from these declarations the CLI flags, the checks, the
"what is missing and how to supply it" message, and the settings recorded with a run
(``mia_fast.methods.registry``).

A run's settings are one :class:`MethodSettings`: one object per settings class, the class's defaults for a
class not given. Fields of two classes that share a flag are one CLI option (e.g. ``--method-seed`` for
SaMIA and PAC); their declarations must agree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, TypeVar

import numpy as np

from mia_fast.errors import MiaFastError

SPEC_KEY = "mia_fast.setting"
T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """A setting's command-line option: ``name`` without its dashes, the ``metavar`` shown in help, the allowed
    ``choices``, ``parse`` from the option's text to the value, other names (``aliases``), and whether the CLI
    reads the value from a file of texts (``texts_file``: one per line, or a data file's text field)."""

    name: str
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    parse: Callable[[str], Any] | None = None
    aliases: tuple[str, ...] = ()
    texts_file: bool = False


@dataclass(frozen=True)
class SettingSpec:
    """How a settings field is shown, parsed and checked: its ``help``, its CLI ``flag`` (None: set from Python
    only, or by CLI options of its own), whether a change of it changes scores (``scores``: it is recorded with
    thresholds and runs), whether a method declaring the class cannot run while the value is empty
    (``required``), and how a user supplies a required value (``supply``, for the error that says it is missing)."""

    help: str
    flag: Flag | None = None
    scores: bool = True
    required: bool = False
    supply: str | None = None


def setting(
    default: Any,
    help: str,
    flag: str | Flag | None = None,
    *,
    scores: bool = True,
    required: bool = False,
    supply: str | None = None,
) -> Any:
    """A settings field: ``samples: int = setting(10, "continuations sampled per text", "samia-samples")``; a
    ``flag`` given by name alone is a plain option (``Flag(name)``)."""
    flag = Flag(flag) if isinstance(flag, str) else flag
    return field(default=default, metadata={SPEC_KEY: SettingSpec(help, flag, scores, required, supply)})


@dataclass(frozen=True)
class SettingField:
    """One declared field of a settings class."""

    owner: type
    name: str
    default: Any
    spec: SettingSpec

    @property
    def key(self) -> str:
        """The flat name of the setting (its flag with underscores, or ``<class>.<field>`` without a flag)."""
        return self.spec.flag.name.replace("-", "_") if self.spec.flag else f"{self.owner.__name__}.{self.name}"

    def supply_text(self) -> str:
        if self.spec.supply:
            return self.spec.supply
        flag = self.spec.flag
        if flag is None:
            return self.spec.help
        return f"{self.spec.help} (--{flag.name}{' ' + flag.metavar if flag.metavar else ''})"


def setting_fields(cls: type) -> list[SettingField]:
    """The declared fields of a settings class; refuses a class that is not a frozen dataclass of settings."""
    if not (is_dataclass(cls) and isinstance(cls, type) and cls.__dataclass_params__.frozen):
        raise MiaFastError(f"{cls!r}: method settings must be a frozen dataclass")
    found = []
    for f in fields(cls):
        if SPEC_KEY in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            found.append(SettingField(cls, f.name, default, f.metadata[SPEC_KEY]))
    return found


def is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (tuple, list, str)) and not value)


class MethodSettings:
    """The settings of a run: one object per settings class; a class not given is its default.

    >>> MethodSettings(SamiaSettings(samples=5)).of(SamiaSettings).samples
    5
    """

    def __init__(self, *values: Any) -> None:
        given: dict[type, Any] = {}
        for value in values:
            setting_fields(type(value))
            if type(value) in given:
                raise MiaFastError(f"two {type(value).__name__} settings given; give each settings class once")
            given[type(value)] = value
        self._given = given

    @classmethod
    def coerce(cls, value: MethodSettings | Iterable[Any] | None) -> MethodSettings:
        """A MethodSettings from itself, an iterable of settings objects, or None (every default)."""
        if isinstance(value, MethodSettings):
            return value
        return cls(*(value or ()))

    def of(self, cls: type[T]) -> T:
        """The settings object of ``cls``: the one given, or its defaults."""
        found = self._given.get(cls)
        return found if found is not None else cls()

    def given(self) -> tuple[Any, ...]:
        return tuple(self._given.values())

    def replace(self, *values: Any) -> MethodSettings:
        """These settings with the objects of ``values``' classes replaced."""
        merged = dict(self._given)
        merged.update((type(v), v) for v in values)
        return MethodSettings(*merged.values())

    def map(self, change: Callable[[Any], Any]) -> MethodSettings:
        """Every given settings object passed through ``change``."""
        return MethodSettings(*(change(value) for value in self._given.values()))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._given.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodSettings) and self._given == other._given

    def __hash__(self) -> int:
        # Consistent with __eq__ without hashing the values (a frequency table may be an array).
        return hash(frozenset(self._given))

    def __repr__(self) -> str:
        return f"MethodSettings({', '.join(map(repr, self._given.values()))})"


def recorded(value: Any) -> Any:
    """A setting's value as JSON, to record and compare: long lists by their digest, objects by their fields."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.ndarray):
        return "sha256:" + hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()[:16]
    if isinstance(value, (list, tuple)):
        return "sha256:" + hashlib.sha256(json.dumps([recorded(v) for v in value]).encode()).hexdigest()[:16]
    if is_dataclass(value):
        return {
            "type": type(value).__name__,
            **{f.name: recorded(getattr(value, f.name)) for f in fields(value) if f.repr and f.name != "progress"},
        }
    return repr(value)
