"""What differs by device (pipeline.device): the device and dtype a model loads on, refused in one line where this
machine lacks them, the defaults sized per device, the CPU's choices of weights layout and attention, and the one
table of what differs by GPU, each row tested by standing in for what the device reports."""

from types import SimpleNamespace

import pytest
import torch

from mia_fast import load_model
from mia_fast.errors import MiaFastError
from mia_fast.pipeline import device
from mia_fast.pipeline.device import (
    DTYPES,
    Accelerator,
    accelerator,
    copies_weights,
    cpu_flash_attention,
    device_plan,
    flash_refusal,
    for_device,
    forked_generators,
    onednn_layout,
    plan_for,
    resolve_device,
    resolve_dtype,
    to_device,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def stand_in(monkeypatch, found: Accelerator) -> None:
    """Every device's plan as that of a device reporting ``found``."""
    monkeypatch.setattr(device, "device_plan", lambda _: plan_for(found))


def test_the_default_dtype_is_fp32_on_a_cpu_and_the_gpus_own_elsewhere(monkeypatch):
    assert resolve_dtype(None, CPU) == torch.float32
    stand_in(monkeypatch, Accelerator("nvidia", "sm_90", native_bf16=True))
    assert resolve_dtype(None, CUDA) == torch.bfloat16
    stand_in(monkeypatch, Accelerator("nvidia", "sm_75", native_bf16=False))
    assert resolve_dtype(None, CUDA) == torch.float16
    assert resolve_dtype("bf16", CUDA) == torch.bfloat16  # the user's --dtype always wins


# One row per GPU a user has: (what it reports; default dtype, flash attention, Triton kernels).
BF16, FP16 = torch.bfloat16, torch.float16
GPU_ROWS = {
    "T4": (Accelerator("nvidia", "sm_75"), FP16, False, True),
    "V100": (Accelerator("nvidia", "sm_70", False), FP16, False, True),
    "P100": (Accelerator("nvidia", "sm_60", False), FP16, False, False),
    "A100": (Accelerator("nvidia", "sm_80", True), BF16, True, True),
    "A10 or RTX 3090": (Accelerator("nvidia", "sm_86", True), BF16, True, True),
    "L4": (Accelerator("nvidia", "sm_89", True), BF16, True, True),
    "H100": (Accelerator("nvidia", "sm_90", True), BF16, True, True),
    "B200": (Accelerator("nvidia", "sm_100", True), BF16, True, True),
    "RTX 5090": (Accelerator("nvidia", "sm_120", True), BF16, True, True),
    "MI250": (Accelerator("amd", "gfx90a", True), BF16, True, True),
    "MI300X": (Accelerator("amd", "gfx942", True), BF16, True, True),
    "MI355X": (Accelerator("amd", "gfx950", True), BF16, True, True),
    "RX 7900": (Accelerator("amd", "gfx1100", True), BF16, False, False),
    "MI100": (Accelerator("amd", "gfx908", False), FP16, False, False),
    "Intel Max": (Accelerator("intel", "", True), BF16, False, False),
    "Apple M2": (Accelerator("apple"), FP16, False, False),
}


@pytest.mark.parametrize("gpu", list(GPU_ROWS))
def test_each_gpu_gets_its_row_of_the_table(gpu):
    found, dtype, flash, kernels = GPU_ROWS[gpu]
    plan = plan_for(found)
    assert (plan.dtype, plan.flash_attention, plan.triton_kernels) == (dtype, flash, kernels)
    # Bytes decide on a GPU: the residual stays in the model's dtype; and what runs on no machine here checks itself.
    assert plan.residual_in_model_dtype and plan.self_checks
    if not flash:
        assert plan.flash_refusal and found.vendor in {"intel", "apple"} or found.arch in plan.flash_refusal
    if not kernels:
        assert plan.triton_refusal


def test_the_cpu_keeps_fp32_a_wide_residual_and_no_self_check():
    plan = device_plan(CPU)
    assert plan.accelerator == Accelerator("cpu")
    assert plan.dtype == torch.float32 and not plan.flash_attention and not plan.triton_kernels
    assert not plan.residual_in_model_dtype and not plan.self_checks
    assert plan_for(Accelerator("hpu")).dtype == torch.float32  # a back end of no row keeps fp32


def test_what_a_device_reports_is_read_from_torch(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _: (7, 5))
    assert accelerator(CUDA) == Accelerator("nvidia", "sm_75", native_bf16=False)
    assert accelerator(CUDA).capability == (7, 5)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda _: (12, 0))
    assert accelerator(CUDA) == Accelerator("nvidia", "sm_120", native_bf16=True)
    assert accelerator(CUDA).capability == (12, 0)
    # torch's ROCm build names an AMD GPU cuda; its architecture comes with feature flags.
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    properties = SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _: properties)
    assert accelerator(CUDA) == Accelerator("amd", "gfx942", native_bf16=True)
    assert accelerator(CUDA).capability is None
    assert accelerator(torch.device("mps")) == Accelerator("apple")
    assert accelerator(CPU) == Accelerator("cpu")


@pytest.mark.parametrize(
    ("name", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)]
)
def test_a_named_dtype_is_taken_on_any_device(name, dtype):
    assert resolve_dtype(name, CPU) == dtype and resolve_dtype(name, CUDA) == dtype


def test_an_unknown_dtype_is_refused_naming_the_choices():
    assert list(DTYPES) == ["fp32", "bf16", "fp16"]
    with pytest.raises(MiaFastError, match=r"^unknown dtype 'float32'; choose one of fp32, bf16, fp16$"):
        resolve_dtype("float32", CPU)


def test_a_default_sized_per_device_falls_back_to_the_gpus():
    table = {"cpu": 1024, "cuda": 16384}
    assert for_device(table, CPU) == 1024
    assert for_device(table, CUDA) == 16384
    assert for_device(table, torch.device("mps")) == 16384


def test_on_a_cpu_weights_are_copied_and_its_own_flash_attention_runs():
    assert copies_weights(CPU) and cpu_flash_attention(CPU) and flash_refusal(CPU) == "not a GPU"
    assert onednn_layout(CPU) == torch.backends.mkldnn.is_available()
    # bf16 weights take oneDNN's layout only where oneDNN computes bf16 products (an AVX2-only CPU refuses them).
    assert onednn_layout(CPU, torch.bfloat16) == (onednn_layout(CPU) and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert forked_generators(CPU) == []


def test_on_a_gpu_the_models_own_weights_and_flash_varlen_attention_run(monkeypatch):
    assert not copies_weights(CUDA) and not onednn_layout(CUDA) and not cpu_flash_attention(CUDA)
    stand_in(monkeypatch, Accelerator("nvidia", "sm_90", native_bf16=True))
    assert flash_refusal(CUDA) is None and forked_generators(CUDA) == [CUDA]
    stand_in(monkeypatch, Accelerator("nvidia", "sm_75", native_bf16=False))
    assert flash_refusal(CUDA) == "torch's flash kernel does not run sm_75"


def test_a_tensor_reaches_the_cpu_unchanged():
    tensor = torch.arange(6).reshape(2, 3)
    moved = to_device(tensor, CPU)
    assert moved.device == CPU and torch.equal(moved, tensor)


def test_the_cpu_is_named_or_chosen_where_there_is_no_gpu():
    assert resolve_device("cpu") == CPU
    if not torch.cuda.is_available():
        assert resolve_device(None) == CPU


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "cpu:0:1"])
def test_an_unknown_device_is_refused_in_one_line(name):
    with pytest.raises(MiaFastError, match=f"^unknown device '{name}': ") as raised:
        resolve_device(name)
    assert "\n" not in str(raised.value)


@no_cuda
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_is_refused_where_there_is_none(name):
    with pytest.raises(
        MiaFastError, match=f"^device '{name}' was asked for but CUDA is not available on this machine$"
    ):
        resolve_device(name)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_is_refused_where_there_is_none():
    with pytest.raises(MiaFastError, match="MPS is not available on this machine"):
        resolve_device("mps")


@no_cuda
def test_cuda_without_cuda_is_refused():
    with pytest.raises(MiaFastError, match="CUDA is not available"):
        load_model("unused", device="cuda")
