"""The one choice of backend for every op: the torch reference or the Triton kernels, and the native core or torch
for a streamed merge. No other module of ``mia_fast.ops`` tests a device or a backend: each asks here."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mia_fast.errors import MiaFastError

if TYPE_CHECKING:
    import torch

# What --backend may name; ``auto`` resolves to one of RUNNING_BACKENDS on a device (:func:`resolve_backend`).
BACKENDS = ("auto", "torch", "triton")
RUNNING_BACKENDS = ("torch", "triton")
Result = TypeVar("Result")


def resolve_backend(backend: str, device: torch.device, *, kernels_run: bool) -> str:
    """The running backend that ``backend`` means on ``device``: ``auto`` picks the Triton kernels where they run that
    GPU (``kernels_run``, from the device's plan: ``mia_fast.pipeline.device``) and triton imports, the torch
    reference otherwise (never the interpreter on its own)."""
    if backend not in BACKENDS:
        raise MiaFastError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "torch" or (backend == "auto" and not kernels_run):
        return "torch"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise MiaFastError("the triton backend needs a CUDA device (or TRITON_INTERPRET=1, for testing on CPU)")
    try:
        import mia_fast.kernels  # noqa: F401, PLC0415  (triton is optional: imported only when asked for)
    except ImportError as exc:
        if backend == "auto":
            return "torch"
        raise MiaFastError(f"the triton backend needs triton: pip install triton ({exc})") from None
    return "triton"


def check_backend(backend: str) -> None:
    """Refuses a backend that is not one of RUNNING_BACKENDS (``auto`` is resolved before an op runs)."""
    if backend not in RUNNING_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(RUNNING_BACKENDS)}, got {backend!r}")


def implementation(
    backend: str, reference: Callable[..., Result], kernel: Callable[..., Result]
) -> Callable[..., Result]:
    """What ``backend`` names: the ``reference`` callable (``"torch"``) or the ``kernel`` one (``"triton"``, a
    :func:`triton_kernel` or :func:`numpy_kernel`), taking the same arguments."""
    check_backend(backend)
    return reference if backend == "torch" else kernel


def triton_kernel(name: str) -> Callable[..., Any]:
    """The Triton kernel ``mia_fast.kernels.<name>``, imported when called (triton is optional)."""

    def run(*arguments: Any) -> Any:
        return _loaded(name)(*arguments)

    return run


def _loaded(name: str) -> Callable[..., Any]:
    import mia_fast.kernels  # noqa: PLC0415  (triton is optional: imported only when a kernel runs)

    return getattr(mia_fast.kernels, name)


def numpy_kernel(name: str, dtypes: Sequence[np.dtype | type | None], device: Any = None) -> Callable[..., np.ndarray]:
    """The Triton kernel ``mia_fast.kernels.<name>`` over numpy arrays: run on :func:`kernel_device` with each
    argument moved there as a tensor of its dtype in ``dtypes`` (None: passed as it is), its result back as numpy."""

    def run(*arguments: Any) -> np.ndarray:
        kernel = _loaded(name)
        on = kernel_device(device)
        tensors = [
            argument if dtype is None else array_to_device(argument, dtype, on)
            for argument, dtype in zip(arguments, dtypes, strict=True)
        ]
        return kernel(*tensors).cpu().numpy()

    return run


def kernel_device(device) -> torch.device:
    """Where the kernels run: ``device``, or CUDA when there is one (the CPU runs them only under the interpreter)."""
    import torch  # noqa: PLC0415  (the CLI reads BACKENDS here and starts without torch)

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def array_to_device(array: np.ndarray, dtype: np.dtype, device):
    """``array`` as a contiguous torch tensor of ``dtype`` on ``device`` (for the kernels)."""
    import torch  # noqa: PLC0415  (the CLI reads BACKENDS here and starts without torch)

    return torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(device)


def streams_natively(device: torch.device, *, native: bool | None) -> bool:
    """Whether a streamed merge on ``device`` asks for the native core: on CPU, unless ``native`` is False (the
    native core reads host memory only)."""
    return native is not False and device.type == "cpu"
