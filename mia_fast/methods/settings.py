"""Method settings: each method module declares a frozen dataclass of its own settings, each field made with
:func:`setting`, which says what the field means, its command-line flag, whether it changes scores and whether
a method cannot run without it. From these declarations come the CLI options (``mia_fast.methods.setting_options``),
the "what is missing and how to supply it" checks before a run (``mia_fast.scoring.method_runs``) and the settings
recorded with a run (:func:`recorded_settings`). A number's declared :class:`Range` is both the CLI's parse-time
check of its flag and the settings class's own check (:func:`check_ranges`, from its ``__post_init__``).

A settings class derives from :class:`CheckedSettings`, which checks it once made. Besides its fields it may declare
hooks, each a protocol here that the class names among its bases: :class:`PreparesForModel` (``prepare(model)``),
:class:`ChecksTexts` (``check_texts(texts)``), :class:`PreparesForTexts` (``before_scoring(texts)``), which the
scoring calls, and :class:`GivesExample` (the classmethod ``example(model)``: settings it runs with on any model for
a quick check), which a class with a required value declares.

A run's settings are one :class:`MethodSettings`: one object per settings class, the class's defaults for a
class not given. Fields of two classes that share a flag are one CLI option; their declarations must agree, so a
shared field is declared once, here (:func:`known_nonmembers`, :func:`method_seed`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from mia_fast.errors import MiaFastError

SPEC_KEY = "mia_fast.setting"
T = TypeVar("T")


@dataclass(frozen=True)
class Range:
    """The finite numbers a value may take: from ``minimum`` (or above it) to ``maximum``, whole numbers only when
    ``whole``; a bound of None is open.

    >>> str(Range(0, 1, exclusive_minimum=True))
    'a number in (0, 1]'
    """

    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    whole: bool = False

    def __str__(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        low, high = map(_shown, (self.minimum, self.maximum))
        if low is not None and high is not None:
            return f"{kind} in {'(' if self.exclusive_minimum else '['}{low}, {high}]"
        if low is not None:
            return f"{kind} {'>' if self.exclusive_minimum else '>='} {low}"
        if high is not None:
            return f"{kind} <= {high}"
        return kind if self.whole else "a finite number"

    def contains(self, value: Any) -> bool:
        kinds = (int, np.integer) if self.whole else (int, float, np.integer, np.floating)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return False
        if isinstance(value, (float, np.floating)) and not math.isfinite(value):
            return False
        above = self.minimum is None or (value > self.minimum if self.exclusive_minimum else value >= self.minimum)
        return above and (self.maximum is None or value <= self.maximum)

    def parse(self, text: str) -> int | float:
        """The number ``text`` spells; ValueError saying what is allowed when it spells none in range."""
        try:
            value = int(text) if self.whole else float(text)
        except ValueError:
            value = None
        if value is None or not self.contains(value):
            raise ValueError(f"must be {self}, got {text!r}")
        return value


def _shown(bound: float | None) -> str | None:
    """A bound as a user types it: 4294967295, not 4.29497e+09."""
    if bound is None:
        return None
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


POSITIVE_INT = Range(1, whole=True)
POSITIVE = Range(0, exclusive_minimum=True)
FRACTION = Range(0, 1, exclusive_minimum=True)
# Every option's number has a finite maximum, so that a slip of the keyboard (--bootstrap 1000000000) is refused
# as it is parsed instead of starting a run that never ends or exhausts memory. The ranges options share:
# numpy's generators take seeds below 2**32.
SEED = Range(0, 2**32 - 1, whole=True)
# A million tokens: more than any model's context.
TOKENS = Range(1, 2**20, whole=True)
# A step above 1 only diverges.
LEARNING_RATE = Range(0, 1, exclusive_minimum=True)
EPOCHS = Range(1, 1000, whole=True)
# Samples, copies or neighbours made of each text: every one costs a forward pass (or a generation) per text.
PER_TEXT = Range(1, 1000, whole=True)
# Texts per optimiser step of a fine-tuning.
BATCH_TEXTS = Range(1, 65_536, whole=True)


@dataclass(frozen=True)
class Flag:
    """A setting's command-line option: ``name`` without its dashes, the ``metavar`` shown in help, the allowed
    ``choices``, ``parse`` from the option's text to the value (a number's declared Range parses it by
    default), other names (``aliases``), whether the CLI reads the value from a file of texts
    (``texts_file``: one per line, or a data file's text field), and whether the value names a file or folder the
    method reads (``path``; a texts file is one), which no command may write over."""

    name: str
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    parse: Callable[[str], Any] | None = None
    aliases: tuple[str, ...] = ()
    texts_file: bool = False
    path: bool = False

    @property
    def reads_path(self) -> bool:
        return self.path or self.texts_file


@dataclass(frozen=True)
class SettingSpec:
    """How a settings field is shown, parsed and checked: its ``help``, its CLI ``flag`` (None: set from Python
    only, or by CLI options of its own), whether a change of it changes scores (``scores``: it is recorded with
    thresholds and runs), whether a method declaring the class cannot run while the value is empty
    (``required``), how a user supplies a required value (``supply``, for the error that says it is missing), and
    the numbers it may take (``bounds``: checked when the flag is parsed and when the settings are made)."""

    help: str
    flag: Flag | None = None
    scores: bool = True
    required: bool = False
    supply: str | None = None
    bounds: Range | None = None


def setting(
    default: Any,
    help: str,
    flag: str | Flag | None = None,
    *,
    scores: bool = True,
    required: bool = False,
    supply: str | None = None,
    bounds: Range | None = None,
) -> Any:
    """A settings field: ``samples: int = setting(10, "continuations sampled per text", "samia-samples",
    bounds=POSITIVE_INT)``; a ``flag`` given by name alone is a plain option (``Flag(name)``)."""
    flag = Flag(flag) if isinstance(flag, str) else flag
    return field(default=default, metadata={SPEC_KEY: SettingSpec(help, flag, scores, required, supply, bounds)})


def known_texts(flag: Flag, help: str, supply: str) -> Any:
    """A required field of known texts (a tuple; :class:`CheckedSettings` freezes a list), which the command line reads
    from a file (``flag``, given ``FILE`` as its metavar: .txt a text per line, or any DATA format's text field)."""
    return setting((), help, dataclasses.replace(flag, metavar="FILE", texts_file=True), required=True, supply=supply)


def known_nonmembers() -> Any:
    """The field of known non-member texts (``--nonmembers FILE``) that several methods read (CAMIA's reference
    set, FSD's fine-tuning set): one declaration, so that its readers agree."""
    return known_texts(
        Flag("nonmembers"),
        "known non-member texts (.txt a text per line, or any DATA format with --text-field)",
        "known non-member texts (--nonmembers FILE)",
    )


# The known non-members of the settings' examples (``example(model)``): written for them, never a text to judge.
EXAMPLE_NONMEMBERS = (
    "These two sentences were written to be known non-member texts of an example run.",
    "A detector compares the texts it scores with known non-members such as this one.",
)


def method_seed() -> Any:
    """The seed of the methods that draw at random (``--method-seed``): one declaration, so that its readers agree and
    its help names each of them."""
    return setting(
        0,
        "seed of the methods' random draws: samia's and ngram_coverage's samples, pac's word swaps, the neighbours "
        "made for neighbor",
        "method-seed",
        bounds=SEED,
    )


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

    @property
    def label(self) -> str:
        """How an error names the field: ``SamiaSettings.samples (--samia-samples)``."""
        flag = f" (--{self.spec.flag.name})" if self.spec.flag else ""
        return f"{self.owner.__name__}.{self.name}{flag}"

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


@dataclass(frozen=True)
class CheckedSettings:
    """The base of a method's settings class (a frozen dataclass too): once made, its known-texts fields hold tuples
    and its numbers are checked against their declared Range (:func:`check_ranges`). A subclass with checks of its
    own makes them after ``super().__post_init__()``."""

    def __post_init__(self) -> None:
        for f in setting_fields(type(self)):
            if f.spec.flag is not None and f.spec.flag.texts_file:
                object.__setattr__(self, f.name, tuple(getattr(self, f.name) or ()))
        check_ranges(self)


def check_ranges(settings: Any) -> None:
    """Refuses a settings object holding a number outside its field's declared Range."""
    for f in setting_fields(type(settings)):
        value = getattr(settings, f.name)
        if f.spec.bounds is not None and not f.spec.bounds.contains(value):
            raise MiaFastError(f"{f.label} must be {f.spec.bounds}, got {value!r}")


@runtime_checkable
class PreparesForModel(Protocol):
    """Settings made ready for the target model: ``prepare(model)`` returns them ready (a probe loaded and checked
    against the model, a frequency table mapped onto its vocabulary); ``model`` is the target's LoadedModel, or None
    before one is loaded (then only what needs no model is done)."""

    def prepare(self, model: Any) -> Any: ...


@runtime_checkable
class ChecksTexts(Protocol):
    """Settings that refuse texts before any is scored (e.g. one among their known prefix texts)."""

    def check_texts(self, texts: Sequence[str]) -> None: ...


@runtime_checkable
class PreparesForTexts(Protocol):
    """Settings that make something ready for a block's texts before they are scored (neighbours generated)."""

    def before_scoring(self, texts: Sequence[str]) -> None: ...


@runtime_checkable
class GivesExample(Protocol):
    """A settings class with settings it runs with on any ``model`` (a LoadedModel) for a quick check: small (few
    samples, a short fine-tuning), not tuned to detect anything."""

    @classmethod
    def example(cls, model: Any) -> Any: ...


class ReadsSettings(Protocol):
    """What names the settings classes it reads (a registered method)."""

    @property
    def settings(self) -> tuple[type, ...]: ...


def settings_classes_of(readers: Iterable[ReadsSettings]) -> list[type]:
    """The settings classes ``readers`` (registered methods) read, each once, in order."""
    return list(dict.fromkeys(cls for reader in readers for cls in reader.settings))


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
            check_ranges(value)
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
    """A setting's value as JSON, to record and compare: long lists by their digest, objects by their fields, a number
    JSON lacks (gradnorm's default norm, inf) as Python spells it."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
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


def recorded_settings(methods: Iterable[ReadsSettings], settings: MethodSettings) -> dict[str, Any]:
    """The settings that change the scores of ``methods``, as JSON by setting key: what a threshold, a resumed
    output or a Ray manifest records and compares."""
    return {
        f.key: recorded(getattr(settings.of(cls), f.name))
        for cls in settings_classes_of(methods)
        for f in setting_fields(cls)
        if f.spec.scores
    }
