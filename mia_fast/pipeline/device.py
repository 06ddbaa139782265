"""What differs by device, decided here alone (and, for the ops' kernels, in ``mia_fast.ops.impl``): which device
and dtype a model is loaded on, how ids reach a GPU, the defaults sized for each kind of device, whether weights are
copied into oneDNN's layout, which attention kernels run, and which generators a seeded fine-tuning forks. The
forward path (:mod:`mia_fast.pipeline.forward_path`) and the engines ask; none of them tests a device's type.
"""

from __future__ import annotations

import torch

from mia_fast.errors import MiaFastError
from mia_fast.pipeline.choices import DTYPE_NAMES

DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, torch.float16), strict=True))


def torch_internal(owner: object, name: str):
    """``owner.<name>``, for what torch offers only under a private name (oneDNN's fused products, aten's flash
    attention ops, an operator's schema, a tensor's version counter), looked up when called. Every such use goes
    through here, so that one search finds them all when a torch release changes one."""
    return getattr(owner, name)


def resolve_device(device: str | None) -> torch.device:
    """The device named (a GPU where one is here, when none is), refused in one line where it is not here."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise MiaFastError(f"unknown device {device!r}: {exc}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise MiaFastError(f"device {device!r} was asked for but CUDA is not available on this machine")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise MiaFastError(
                f"device {device!r} was asked for but this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise MiaFastError(f"device {device!r} was asked for but MPS is not available on this machine")
    return resolved


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """The dtype named, or by default bf16 on a GPU and fp32 elsewhere."""
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise MiaFastError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def for_device(table: dict[str, int], device: torch.device) -> int:
    """A default sized per kind of device (``cpu``, ``cuda``): a device the table does not name takes the GPU's."""
    return table.get(device.type, table["cuda"])


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``; to a GPU from pinned memory, queued without waiting for the copy (torch
    keeps the pinned block until the copy is done)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def copies_weights(device: torch.device) -> bool:
    """Whether the packed decoder copies a model's weights once into fused, reordered ones here: on a CPU, where the
    faster products pay for the copy's memory (a GPU's products read the model's own weights)."""
    return device.type == "cpu"


def onednn_layout(device: torch.device, dtype: torch.dtype = torch.float32) -> bool:
    """Whether copied weights of ``dtype`` take oneDNN's blocked layout for their products here: on a CPU with oneDNN,
    and for bf16 or fp16 one whose instructions oneDNN computes them with (an AVX2-only CPU has none: oneDNN refuses
    to lay such weights out, and torch's own products run them)."""
    if not (copies_weights(device) and torch.backends.mkldnn.is_available()):
        return False
    if dtype == torch.bfloat16:
        return torch_internal(torch.ops.mkldnn, "_is_mkldnn_bf16_supported")()
    if dtype == torch.float16:
        return torch_internal(torch.ops.mkldnn, "_is_mkldnn_fp16_supported")()
    return True


def on_flash_device(device: torch.device) -> bool:
    """Whether torch's flash ``varlen_attn`` can run here (a GPU; its dtype and head size decide the rest)."""
    return device.type == "cuda"


def cpu_flash_attention(device: torch.device) -> bool:
    """Whether torch's fp32 flash attention for CPU, which gives each query's log-sum-exp, runs here."""
    return device.type == "cpu"


def forked_generators(device: torch.device) -> list[torch.device]:
    """The devices whose generators a seeded run forks and restores beside the host's."""
    return [device] if device.type == "cuda" else []
