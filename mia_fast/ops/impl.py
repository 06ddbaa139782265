"""The one choice of implementation for every op: the reference or the Triton kernels."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from mia_fast.errors import MiaFastError

if TYPE_CHECKING:
    import torch

BACKENDS = ("auto", "torch", "triton")
IMPLS = ("torch", "triton")


def resolve_backend(backend: str, device: torch.device) -> str:
    """The impl that ``backend`` means on ``device``: ``auto`` picks the Triton kernels on CUDA when
    triton imports, the torch reference otherwise (never the interpreter on its own)."""
    if backend not in BACKENDS:
        raise MiaFastError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "torch" or (backend == "auto" and device.type != "cuda"):
        return "torch"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise MiaFastError("the triton backend needs a CUDA device (or TRITON_INTERPRET=1, for testing on CPU)")
    try:
        import mia_fast.kernels  # noqa: F401
    except ImportError as exc:
        if backend == "auto":
            return "torch"
        raise MiaFastError(f"the triton backend needs triton: pip install triton ({exc})") from None
    return "triton"


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")


def kernel_device(device) -> torch.device:
    """Where the kernels run: ``device``, or CUDA when there is one (the CPU runs them only under the interpreter)."""
    import torch

    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
