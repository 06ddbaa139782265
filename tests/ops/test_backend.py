"""The one choice of backend: what --backend means on a device (the interpreter only where asked for), the
implementation a backend runs (reference or kernel, the kernel imported only when it runs), the kernels' device and
arguments, and whether a streamed merge asks for the native core."""

import numpy as np
import pytest
import torch

from mia_fast import kernels
from mia_fast.errors import MiaFastError
from mia_fast.ops.backend import (
    BACKENDS,
    RUNNING_BACKENDS,
    array_to_device,
    check_backend,
    implementation,
    kernel_device,
    numpy_kernel,
    resolve_backend,
    streams_natively,
    triton_kernel,
)

CPU = torch.device("cpu")


def test_on_cpu_auto_and_torch_mean_the_reference_and_triton_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_backend("auto", CPU, kernels_run=False) == "torch"  # never the interpreter on its own
    assert resolve_backend("torch", CPU, kernels_run=False) == "torch"
    assert resolve_backend("triton", CPU, kernels_run=False) == "triton"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # set, but off
    with pytest.raises(MiaFastError, match="the triton backend needs a CUDA device"):
        resolve_backend("triton", CPU, kernels_run=False)
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(MiaFastError, match="the triton backend needs a CUDA device"):
        resolve_backend("triton", CPU, kernels_run=False)
    with pytest.raises(MiaFastError, match="unknown backend 'cuda'; choose one of auto, torch, triton"):
        resolve_backend("cuda", CPU, kernels_run=False)


def test_auto_means_the_kernels_where_the_device_plan_says_they_run_and_triton_imports():
    gpu = torch.device("cuda")
    assert resolve_backend("auto", gpu, kernels_run=True) == "triton"
    assert resolve_backend("auto", gpu, kernels_run=False) == "torch"  # e.g. a Pascal GPU, an Intel GPU
    assert resolve_backend("torch", gpu, kernels_run=True) == "torch"


def test_a_backend_runs_the_reference_or_the_kernel_and_nothing_else():
    def reference(x):
        return ("reference", x)

    def kernel(x):
        return ("kernel", x)

    assert implementation("torch", reference, kernel)(1) == ("reference", 1)
    assert implementation("triton", reference, kernel)(2) == ("kernel", 2)
    for backend in ("auto", "cuda", "Torch"):
        with pytest.raises(ValueError, match=f"backend must be one of torch, triton, got '{backend}'"):
            implementation(backend, reference, kernel)
    check_backend("torch")
    check_backend("triton")
    assert set(RUNNING_BACKENDS) < set(BACKENDS)


def test_a_kernel_by_name_runs_the_kernel_of_mia_fast_kernels():
    device = kernel_device(None)
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)).to(device)
    targets = torch.tensor([0, 17, 49], device=device)
    for got, expected in zip(triton_kernel("token_stats")(logits, targets), kernels.token_stats(logits, targets)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_numpy_kernel_moves_each_argument_as_its_dtype_and_returns_numpy():
    values = np.array([3.0, 1.0, 2.0, 5.0, 4.0])[::-1]  # float64, not contiguous: made float32 and contiguous
    offsets, counts = np.array([0, 2, 5]), np.array([[1], [2]])
    got = numpy_kernel("bottom_k_means", (np.float32, np.int64, np.int64))(values, offsets, counts)
    assert isinstance(got, np.ndarray) and got.tolist() == [[4.0], [1.5]]  # the lowest of (4, 5); of (2, 1, 3)
    with pytest.raises(ValueError):  # one dtype per argument
        numpy_kernel("bottom_k_means", (np.float32, np.int64))(values, offsets, counts)


def test_the_kernels_device_and_tensors():
    assert kernel_device("cpu") == CPU and kernel_device(torch.device("meta")) == torch.device("meta")
    assert kernel_device(None) == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tensor = array_to_device(np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::2], np.int64, "cpu")
    assert tensor.dtype == torch.int64 and tensor.is_contiguous() and tensor.tolist() == [[0, 2], [3, 5]]


def test_a_streamed_merge_asks_for_the_native_core_on_cpu_unless_turned_off():
    assert streams_natively(CPU, native=None) and streams_natively(CPU, native=True)
    assert not streams_natively(CPU, native=False)
    assert not streams_natively(torch.device("cuda"), native=None)
    assert not streams_natively(torch.device("meta"), native=True)
