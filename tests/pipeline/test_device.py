"""What differs by device (pipeline.device): the device and dtype a model loads on, refused in one line where this
machine lacks them, the defaults sized per device, and the CPU's choices of weights layout and attention."""

import pytest
import torch

from mia_fast import load_model
from mia_fast.errors import MiaFastError
from mia_fast.pipeline.device import (
    DTYPES,
    copies_weights,
    cpu_flash_attention,
    for_device,
    forked_generators,
    on_flash_device,
    onednn_layout,
    resolve_device,
    resolve_dtype,
    to_device,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def test_the_default_dtype_is_bf16_on_a_gpu_and_fp32_elsewhere():
    assert resolve_dtype(None, CPU) == torch.float32
    assert resolve_dtype(None, CUDA) == torch.bfloat16
    assert resolve_dtype(None, torch.device("mps")) == torch.float32


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
    assert copies_weights(CPU) and cpu_flash_attention(CPU) and not on_flash_device(CPU)
    assert onednn_layout(CPU) == torch.backends.mkldnn.is_available()
    # bf16 weights take oneDNN's layout only where oneDNN computes bf16 products (an AVX2-only CPU refuses them).
    assert onednn_layout(CPU, torch.bfloat16) == (onednn_layout(CPU) and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert forked_generators(CPU) == []


def test_on_a_gpu_the_models_own_weights_and_flash_varlen_attention_run():
    assert not copies_weights(CUDA) and not onednn_layout(CUDA) and not cpu_flash_attention(CUDA)
    assert on_flash_device(CUDA) and forked_generators(CUDA) == [CUDA]


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
