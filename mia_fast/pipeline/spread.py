"""A model whose layers are spread over devices by a device map (``--device-map``), through accelerate's hooks as
``from_pretrained(device_map=...)`` places them: the map checked against this machine's devices and the model's modules
before any weight loads, the temporary offload folder, where the ids go in and where the head (and so the token
statistics) runs, what the path line says of the layers, and weights kept offloaded read in one module at a time.

Such a model runs through its own forward (``forward_path`` says why it is not packed): each module's hook moves its
inputs to the device it runs on and, for a module kept on the disk (or on the CPU beside GPUs), reads its weights in
for the length of its forward. A map that puts everything on one device places no hook: that model is whole, as one
loaded with ``--device``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import logging
import os
import shutil
import socket
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mia_fast.errors import MiaFastError, one_line
from mia_fast.pipeline.device import resolve_device
from mia_fast.pipeline.device_map import DEVICES_SAID, DISK, DeviceMap
from mia_fast.pipeline.model_folders import check_loaded_whole

# accelerate's logger that notes each offloaded device when a model is dispatched (a warning a run does not need).
_DISPATCH_LOGGER = "accelerate.big_modeling"


def main_device(device: str | DeviceMap | None) -> torch.device:
    """The device named (:func:`~mia_fast.pipeline.device.resolve_device`), or a device map's main one, whose default
    precision the model takes: the first GPU the map names (a planner's: a GPU where one is here), else the CPU. The
    map's devices are checked here (:func:`placements`)."""
    if not isinstance(device, DeviceMap):
        return resolve_device(device)
    placed = placements(device)
    if isinstance(placed, str):
        return resolve_device(None)
    cpu = torch.device("cpu")
    return next((d for d in (torch.device(p) for p in placed.values() if p != DISK) if d != cpu), cpu)


def placements(device_map: DeviceMap) -> str | dict[str, str]:
    """What ``from_pretrained`` takes for ``device_map``: a planner's name, or each module's device, refused in one line
    where a device is none (or one this machine lacks), or accelerate, which places them, is not installed."""
    if importlib.util.find_spec("accelerate") is None:
        raise MiaFastError("--device-map needs the package accelerate, which places the layers: pip install accelerate")
    if device_map.planner is not None:
        return device_map.planner
    return {name: _placed(name, device) for name, device in device_map.modules().items()}


def _placed(name: str, device: str | int) -> str:
    if device == DISK:
        return DISK
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        if isinstance(device, int):  # a GPU's number where no GPU is here
            raise MiaFastError(f"--device-map: module {name!r} goes to GPU {device}: {one_line(exc)}") from None
        raise MiaFastError(f"--device-map: module {name!r} goes to {device!r}, not a device ({DEVICES_SAID})") from None
    if parsed == torch.device("meta"):
        raise MiaFastError(f"--device-map: module {name!r} goes to 'meta', which holds no weights ({DEVICES_SAID})")
    try:
        return str(resolve_device(str(parsed)))
    except MiaFastError as exc:
        raise MiaFastError(f"--device-map: module {name!r}: {exc}") from None


def check_modules(device_map: DeviceMap, source: str, name: str) -> None:
    """Refuses, in one line and before any weight loads, a map that names a module the model (``source``, as
    ``from_pretrained`` reads it) lacks or leaves one of its weights without a device: the model is built from its
    config with no weights, as accelerate would check it after loading them all."""
    check_loaded_whole(source, name)
    placed = placements(device_map)
    if isinstance(placed, str):
        return
    model = _empty_model(source, name)
    modules = dict(model.named_modules())
    unknown = next((key for key in placed if key and key not in modules), None)
    if unknown is not None:
        close = difflib.get_close_matches(unknown, modules, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; its modules: {_outline(modules)}"
        raise MiaFastError(f"--device-map: {name} has no module {unknown!r}{hint}")
    left = [w for w in model.state_dict() if not any(_within(w, key) for key in placed)]
    if left:
        raise MiaFastError(
            f"--device-map gives no device to {len(left)} weight(s) of {name}, e.g. {left[0]}: name its module, or "
            '"" for every module the map does not name'
        )


def _within(weight: str, module: str) -> bool:
    return not module or weight == module or weight.startswith(module + ".")


def _outline(modules: dict[str, torch.nn.Module]) -> str:
    """The model's modules two levels down, a stack of layers as its range (``model.layers.0-31``)."""
    shown = []
    for name, module in modules.items():
        if name and name.count(".") <= 1:
            stack = isinstance(module, torch.nn.ModuleList) and len(module)
            shown.append(f"{name}.0-{len(module) - 1}" if stack else name)
    return ", ".join(shown)


def _empty_model(source: str, name: str) -> torch.nn.Module:
    from accelerate import init_empty_weights  # noqa: PLC0415 (optional: accelerate, only a device map needs it)
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415 (transformers: 2 s at start-up)

    try:
        config = AutoConfig.from_pretrained(source)
        with init_empty_weights():
            return AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # hub, file and config errors all end here
        raise MiaFastError(f"could not load model {name!r}: {one_line(exc)}") from None


class SpreadLoading:
    """A model class (``model_class``, e.g. ``AutoModelForCausalLM``) whose ``from_pretrained`` places the layers by a
    device map: the map's devices and modules checked before any weight loads, a temporary offload folder under
    ``cache/offload`` for weights that must be written out to be kept on the disk, and accelerate's notes quieted while
    it loads. :meth:`finish` keeps the folder as long as the model lives where it holds any weight (removed with it, or
    when the process ends; one a killed process left is removed by the next load)."""

    def __init__(self, model_class: Any, device_map: DeviceMap, source: str, name: str, cache: Path) -> None:
        check_modules(device_map, source, name)
        self.model_class = model_class
        self.placements = placements(device_map)
        self.folder = _offload_folder(cache / "offload")
        self._removal = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)

    def from_pretrained(
        self, source: str, *, dtype: torch.dtype | None, output_loading_info: bool, ignore_mismatched_sizes: bool
    ) -> Any:
        """``model_class.from_pretrained`` with the device map and the offload folder."""
        logger = logging.getLogger(_DISPATCH_LOGGER)
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            return self.model_class.from_pretrained(
                source,
                dtype=dtype,
                output_loading_info=output_loading_info,
                ignore_mismatched_sizes=ignore_mismatched_sizes,
                device_map=self.placements,
                offload_folder=str(self.folder),
            )
        finally:
            logger.setLevel(level)

    def finish(self, model: torch.nn.Module) -> torch.device:
        """Hands the offload folder to ``model`` (removed now where it holds nothing) and returns the device its head
        runs on: where the token statistics are reduced."""
        self._removal.detach()
        if any(self.folder.iterdir()):
            weakref.finalize(model, shutil.rmtree, self.folder, ignore_errors=True)
        else:
            shutil.rmtree(self.folder, ignore_errors=True)
        spread = spread_of(model)
        return spread.head_device if spread is not None else next(model.parameters()).device


def _offload_folder(root: Path) -> Path:
    """A new folder under ``root`` (under the system's temporary folder where ``root`` cannot be made) named after this
    host and process; folders of this host's processes that have ended are removed first."""
    host = socket.gethostname()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:  # a cache directory this user cannot write
        root = Path(tempfile.gettempdir()) / "mia-fast-offload"
        root.mkdir(parents=True, exist_ok=True)
    for old in root.iterdir():
        pid, at, rest = old.name.partition("@")
        if at and pid.isdigit() and rest.rpartition("@")[0] == host and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}@{host}@", dir=root))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


@dataclass(frozen=True)
class Spread:
    """Where a spread model runs: ``layers`` says where its decoder layers are (``3 layers on cuda:0, 5 on cpu``),
    ``input_device`` takes its ids (its input embedding's), ``head_device`` runs its output head and the reductions."""

    layers: str
    input_device: torch.device
    head_device: torch.device

    def describe(self) -> str:
        return f"{self.layers}; ids in on {self.input_device}, head on {self.head_device}"


def spread_of(model: torch.nn.Module) -> Spread | None:
    """Where ``model``'s parts run, where a device map spread them (over several devices, or the disk); None for a
    model whole on one device."""
    device_map = _spread_map(model)
    if device_map is None:
        return None
    head = model.get_output_embeddings()
    input_device = _execution_device(model.get_input_embeddings(), model)
    head_device = _execution_device(head, model) if head is not None else input_device
    return Spread(_layers(model, device_map), input_device, head_device)


def ids_device(model: torch.nn.Module, whole: torch.device) -> torch.device:
    """Where ``model`` takes its ids: ``whole`` (its device) for a model whole on one device, else its input
    embedding's (cheaper than :func:`spread_of`, for every batch)."""
    return whole if _spread_map(model) is None else _execution_device(model.get_input_embeddings(), model)


def _spread_map(model: torch.nn.Module) -> dict[str, Any] | None:
    """The device map that spread ``model`` over several devices, or the disk; None for a model whole on one."""
    device_map = getattr(model, "hf_device_map", None)
    devices = {_shown(d) for d in (device_map or {}).values()}
    return device_map if len(devices) > 1 or DISK in devices else None


def _shown(device: Any) -> str:
    return str(torch.device(device)) if isinstance(device, int) else str(device)


def _layers(model: torch.nn.Module, device_map: dict[str, Any]) -> str:
    """``2 layers on cuda:0, 1 split over cpu and disk, 3 on disk``: the decoder layers by where the map put them."""
    count = getattr(model.config, "num_hidden_layers", None)
    stack = next(
        (n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count and count), None
    )
    if stack is None:
        return "its modules on " + ", ".join(sorted({_shown(d) for d in device_map.values()}))
    counted: dict[str, int] = {}
    for index in range(count):
        name = f"{stack}.{index}"
        inside = {_shown(d) for key, d in device_map.items() if key.startswith(name + ".")}
        owner = max((key for key in device_map if _within(name, key)), key=len, default=None)
        places = sorted(inside | ({_shown(device_map[owner])} if owner is not None else set()))
        where = f"split over {' and '.join(places)}" if len(places) > 1 else f"on {places[0]}"
        counted[where] = counted.get(where, 0) + 1
    parts = [f"{n} {where}" for where, n in counted.items()]
    first = next(iter(counted.values()))
    parts[0] = parts[0].replace(" ", " layer " if first == 1 else " layers ", 1)
    return ", ".join(parts)


def _execution_device(module: torch.nn.Module, model: torch.nn.Module) -> torch.device:
    """Where ``module`` runs: its hook's execution device, else where its weights are, else the model's main
    device."""
    for owner in (module, model):
        for hook in _hooks(owner):
            if getattr(hook, "execution_device", None) is not None:
                return torch.device(hook.execution_device)
        tensor = next((t for t in owner.parameters() if not t.is_meta), None)
        if tensor is not None:
            return tensor.device
    return torch.device("cpu")


def _hooks(module: torch.nn.Module) -> list[Any]:
    hook = getattr(module, "_hf_hook", None)
    return [] if hook is None else list(getattr(hook, "hooks", [hook]))


@contextlib.contextmanager
def onloaded(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``module`` with its own weights where it runs for the length of the block: read in where a device map keeps
    them offloaded (on the disk, or on the CPU beside GPUs), as its forward would; as it is otherwise."""
    offloading = [hook for hook in _hooks(module) if getattr(hook, "offload", False)]
    for hook in offloading:
        hook.pre_forward(module)
    try:
        yield module
    finally:
        for hook in offloading:
            hook.post_forward(module, None)


def parameter_values(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Each parameter of ``model`` by name, in ``named_parameters``' order; one that a device map keeps offloaded is
    read in (its module's weights alone) for as long as the caller looks at it."""
    for name, parameter in model.named_parameters():
        if not parameter.is_meta:
            yield name, parameter
            continue
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner)
        with onloaded(module):
            yield name, getattr(module, leaf)
