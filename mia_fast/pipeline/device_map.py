"""A device map as a user gives it (``--device-map``, or ``ModelConfig(device=DeviceMap(...))``): the value, and the
reading of what it says. This module imports no torch (a run's configuration holds a DeviceMap, and ``mia-fast --help``
starts without torch); which devices are here, and which modules the model has, are checked where the model loads
(:mod:`mia_fast.pipeline.spread`).

A map is one of accelerate's planners (``auto``: the layers spread over the GPUs here, then the CPU, then the disk;
``balanced``, ``balanced_low_0``, ``sequential``), or module names mapped to devices (``cuda:0`` or ``0``, ``cpu``,
``disk``), given as a mapping, a JSON object, or the path of a JSON file holding one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mia_fast.errors import MiaFastError

# accelerate's planners, which place the layers by the memory each device has.
PLANNERS = ("auto", "balanced", "balanced_low_0", "sequential")
# The placement that keeps a module's weights in files, read in at each forward.
DISK = "disk"
_FORMS = (
    f"{', '.join(PLANNERS[:-1])} or {PLANNERS[-1]}, a JSON object of module names to devices (cuda:0, cpu, disk), "
    "or a .json file holding one"
)
# What a device map that names devices may place a module on, as its refusals say it.
DEVICES_SAID = "cuda:0 or 0, cpu, disk"
# JSON's names of the values a device map is not.
_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
# A device map given on a command line is shown in messages up to this many characters.
_SHOWN = 60


@dataclass(frozen=True)
class DeviceMap:
    """Where a model's parts go when it is loaded, instead of one device: ``spec`` is a planner's name
    (:data:`PLANNERS`), a JSON object (its text), the path of a JSON file holding one, or a mapping of module names
    (``""``: the whole model, or the rest of it) to devices (``"cuda:0"`` or ``0``, ``"cpu"``, ``"disk"``)."""

    spec: str | os.PathLike | Mapping[str, str | int]

    def __str__(self) -> str:
        """The map as given, cut to a message's width."""
        spec = self.spec
        shown = json.dumps({str(k): str(v) for k, v in spec.items()}) if _is_map(spec) else os.fspath(spec)
        return shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."

    @property
    def planner(self) -> str | None:
        """The planner's name where the map is one, else None."""
        return self.spec.strip() if isinstance(self.spec, str) and self.spec.strip() in PLANNERS else None

    def modules(self) -> dict[str, str | int]:
        """The module names and devices of a map that names them (read from its JSON text or file), each device as
        given: refused in one line where the map is none of the forms, its JSON is malformed, or a name or device is
        not a string (a device may be a GPU's number)."""
        spec = self.spec
        if _is_map(spec):
            return _checked_entries(dict(spec), self)
        text = os.fspath(spec)
        if text.lstrip().startswith(("{", "[")):  # JSON text (an array is refused as not an object)
            return _checked_entries(_json(text, f"--device-map {self}"), self)
        path = Path(text).expanduser()
        if not path.is_file():
            hint = "; to put the whole model on one device, use --device" if _one_device_name(text) else ""
            raise MiaFastError(f"--device-map {self}: not {_FORMS} (no such file){hint}")
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise MiaFastError(f"--device-map {path}: cannot be read ({reason})") from None
        return _checked_entries(_json(content, f"--device-map {path}"), self)


def _is_map(spec: object) -> bool:
    return isinstance(spec, Mapping)


def _one_device_name(text: str) -> bool:
    """Whether ``text`` reads as one device (``cpu``, ``cuda:1``, ``0``): a map of one device is ``--device``."""
    kind, _, index = text.partition(":")
    return text.isdigit() or (kind.isalpha() and kind.islower() and (not index or index.isdigit()))


def _json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MiaFastError(f"{what}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _checked_entries(value: object, device_map: DeviceMap) -> dict[str, str | int]:
    """``value`` as a map of module names to devices, refused in one line where it is not one."""
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), "null")
        raise MiaFastError(f"--device-map {device_map}: a JSON object of module names to devices, not {kind}")
    if not value:
        raise MiaFastError(f"--device-map {device_map}: the map is empty; name each module's device, or use auto")
    entries = {}
    for name, device in value.items():
        if not isinstance(name, str):
            raise MiaFastError(f"--device-map {device_map}: module names are strings, not {name!r}")
        if _torch_device(device):
            device = str(device)
        if isinstance(device, bool) or not isinstance(device, (str, int)) or (isinstance(device, int) and device < 0):
            raise MiaFastError(f"--device-map: module {name!r} goes to {device!r}, not a device ({DEVICES_SAID})")
        entries[name] = device
    return entries


def _torch_device(value: object) -> bool:
    """Whether ``value`` is a ``torch.device`` (told without importing torch), which a mapping may hold."""
    return type(value).__module__ == "torch" and type(value).__name__ == "device"
