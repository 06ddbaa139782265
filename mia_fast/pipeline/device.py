"""What differs by device, decided here alone (and, for the ops' kernels, in ``mia_fast.ops.backend``): which device
and dtype a model is loaded on, how ids reach a GPU, the defaults sized for each kind of device, whether weights are
copied into oneDNN's layout, which attention kernels run, and which generators a seeded fine-tuning forks. The
forward path (:mod:`mia_fast.pipeline.forward_path`) and the engines ask; none of them tests a device's type.

What differs by GPU is one table (:func:`plan_for`), read from what the device reports of itself
(:class:`Accelerator`: its vendor, its NVIDIA compute capability or AMD gfx architecture, native bf16), as vLLM's
platform table does: the default dtype, whether torch's flash attention and our Triton kernels run it, the residual
stream's dtype, and whether a process checks the kernels and the packed forward there on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# torch's flash attention kernel (under ``varlen_attn``) runs NVIDIA GPUs of these compute capabilities, and on ROCm
# the Instinct GPUs AOTriton builds it for; our Triton kernels compile without spills for NVIDIA from sm_70 and for
# these AMD targets (``benchmarks/kernels_aot.py``).
FLASH_CAPABILITIES = ((8, 0), (12, 1))
FLASH_GFX = ("gfx90a", "gfx942", "gfx950")
TRITON_MIN_CAPABILITY = (7, 0)
TRITON_GFX = ("gfx90a", "gfx942", "gfx950")
GPU_VENDORS = ("nvidia", "amd", "intel", "apple")
# AMD architectures that compute bf16 natively (CDNA 2 on, RDNA 3 on).
BF16_GFX = ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")
BF16_GFX_FAMILIES = ("gfx11", "gfx12")


@dataclass(frozen=True)
class Accelerator:
    """What a device reports of itself: its ``vendor`` (``nvidia``, ``amd``, ``intel``, ``apple``; ``cpu`` for the
    host), its ``arch`` (``sm_XY`` from an NVIDIA compute capability, an AMD gfx name; empty where torch names none)
    and whether it computes bf16 natively."""

    vendor: str
    arch: str = ""
    native_bf16: bool = False

    @property
    def capability(self) -> tuple[int, int] | None:
        """An NVIDIA GPU's compute capability (``sm_90``: (9, 0), ``sm_120``: (12, 0)); None on others."""
        if self.vendor != "nvidia" or not self.arch.startswith("sm_"):
            return None
        number = int(self.arch[3:])
        return divmod(number, 10)


@dataclass(frozen=True)
class DevicePlan:
    """What the default path does on one device: its default ``dtype``; torch's flash attention and our Triton
    kernels where they run it (None), else why not (a phrase for the ``--verbose`` path line); whether the packed
    decoder keeps its residual stream in the model's dtype (where bytes decide: a GPU) or in fp32 (a CPU, where
    it costs nothing measurable and keeps bf16 as near fp32 as vLLM's); and whether the kernels and the packed
    forward check themselves against the references the first time they run (every device no test here runs)."""

    accelerator: Accelerator
    dtype: torch.dtype
    flash_refusal: str | None
    triton_refusal: str | None
    residual_in_model_dtype: bool
    self_checks: bool

    @property
    def flash_attention(self) -> bool:
        return self.flash_refusal is None

    @property
    def triton_kernels(self) -> bool:
        return self.triton_refusal is None


def accelerator(device: torch.device) -> Accelerator:
    """What ``device`` reports: an AMD GPU under torch's ROCm build (which names it ``cuda``), an NVIDIA GPU, Intel's
    ``xpu``, Apple's ``mps``, or the host."""
    if device.type == "cuda":
        if torch.version.hip:
            arch = torch.cuda.get_device_properties(device).gcnArchName.split(":")[0]
            return Accelerator("amd", arch, native_bf16=arch in BF16_GFX or arch.startswith(BF16_GFX_FAMILIES))
        major, minor = torch.cuda.get_device_capability(device)
        return Accelerator("nvidia", f"sm_{major}{minor}", native_bf16=(major, minor) >= (8, 0))
    if device.type == "xpu":
        return Accelerator("intel", native_bf16=bool(torch.xpu.is_bf16_supported()))
    if device.type == "mps":
        return Accelerator("apple")
    return Accelerator(device.type)


def plan_for(found: Accelerator) -> DevicePlan:
    """The one table of what differs by GPU: a row per vendor, decided by its architecture."""
    if found.vendor in ("cpu", "meta"):
        return DevicePlan(
            found, torch.float32, "not a GPU", "not a GPU", residual_in_model_dtype=False, self_checks=False
        )
    # A device of no vendor in this table (another torch back end) keeps fp32, as before it had a row.
    dtype = torch.bfloat16 if found.native_bf16 else torch.float16 if found.vendor in GPU_VENDORS else torch.float32
    flash_refusal = "torch's flash varlen_attn runs on NVIDIA and AMD GPUs only"
    triton_refusal = "our Triton kernels are compiled for NVIDIA and AMD GPUs only"
    if found.vendor == "nvidia":
        capability = found.capability
        low, high = FLASH_CAPABILITIES
        flash_refusal = None if low <= capability <= high else f"torch's flash kernel does not run {found.arch}"
        triton_refusal = None if capability >= TRITON_MIN_CAPABILITY else f"Triton does not compile for {found.arch}"
    elif found.vendor == "amd":
        flash_refusal = None if found.arch in FLASH_GFX else f"torch's flash kernel does not run {found.arch}"
        triton_refusal = None if found.arch in TRITON_GFX else f"not compiled for {found.arch}"
    return DevicePlan(found, dtype, flash_refusal, triton_refusal, residual_in_model_dtype=True, self_checks=True)


def device_plan(device: torch.device) -> DevicePlan:
    """The plan of ``device``: :func:`plan_for` of what it reports (torch keeps a GPU's properties: asking is free)."""
    return plan_for(accelerator(device))


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """The dtype named, or the device's default (:func:`plan_for`): fp32 on a CPU, bf16 on a GPU that computes it
    natively, fp16 on one that does not (a T4, a V100)."""
    if dtype is None:
        return device_plan(device).dtype
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


def flash_refusal(device: torch.device) -> str | None:
    """Why torch's flash ``varlen_attn`` cannot run on ``device`` (None where it can: its dtype and head size decide
    the rest)."""
    return device_plan(device).flash_refusal


def cpu_flash_attention(device: torch.device) -> bool:
    """Whether torch's fp32 flash attention for CPU, which gives each query's log-sum-exp, runs here."""
    return device.type == "cpu"


def forked_generators(device: torch.device) -> list[torch.device]:
    """The devices whose generators a seeded run forks and restores beside the host's."""
    return [device] if device.type == "cuda" else []
