"""The kernels' check on first use (ops.self_check), run here in Triton's interpreter: healthy kernels agree with the
reference at any vocabulary, a kernel wrong on any of the special paths (a row of -inf, a vocabulary that is no
multiple of the block, the ignore index) or one that raises is caught and named, and each device, dtype and
vocabulary is checked once a process."""

import importlib

import numpy as np
import pytest
import torch

from mia_fast.ops import self_check

kernels = importlib.import_module("mia_fast.kernels")
token_stats_kernel = importlib.import_module("mia_fast.kernels.token_stats")  # the package's name is a function
RIGHT_TOKEN_STATS = token_stats_kernel._token_stats
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(self_check, "_verdicts", {})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("vocab_size", [1000, 2053])
def test_healthy_kernels_agree_with_the_reference(dtype, vocab_size):
    assert self_check.kernels_disagree(CPU, dtype, vocab_size) == (None, True)
    assert self_check.kernels_disagree(CPU, dtype, vocab_size) == (None, False)  # once a process


def wrong_where(monkeypatch, broken) -> None:
    """token_stats whose outputs ``broken(logits, targets, outputs)`` changes."""

    def wrong(logits, targets, ignore_index, config):
        outputs = RIGHT_TOKEN_STATS(logits, targets, ignore_index, config)
        return broken(logits, targets, outputs)

    monkeypatch.setattr(token_stats_kernel, "_token_stats", wrong)


def off_on_rows(rows, by=0.25):
    def broken(logits, targets, outputs):
        logp = outputs[0].clone()
        logp[rows] += by
        return (logp, *outputs[1:])

    return broken


@pytest.mark.parametrize(
    ("case", "rows"),
    [("a plain row", [0]), ("a row of -inf but for three logits", [2]), ("the ignore index", [3])],
)
def test_a_kernel_wrong_on_one_special_row_is_caught_and_named(case, rows, monkeypatch):
    wrong_where(monkeypatch, off_on_rows(rows))
    verdict, new = self_check.kernels_disagree(CPU, torch.float32, 1000)
    assert new and verdict == "the token_stats kernel differs from the torch reference by 0.25", case
    assert self_check.kernels_disagree(CPU, torch.float32, 1000) == (verdict, False)


def test_a_kernel_that_raises_or_gives_nan_is_caught(monkeypatch):
    def raises(logits, targets, outputs):
        raise RuntimeError("no kernel image is available for execution on the device\nmore")

    wrong_where(monkeypatch, raises)
    assert self_check.kernels_disagree(CPU, torch.float16, 1000)[0] == (
        "the token_stats kernel failed: RuntimeError: no kernel image is available for execution on the device"
    )
    wrong_where(monkeypatch, lambda logits, targets, outputs: (outputs[0] * np.nan, *outputs[1:]))
    verdict, _ = self_check.kernels_disagree(CPU, torch.float32, 1000)
    assert verdict == "the token_stats kernel differs from the torch reference by inf"


def test_the_reductions_kernels_are_checked_too(monkeypatch):
    right = kernels.bottom_k_means

    def wrong(values, offsets, counts):
        return right(values, offsets, counts) + 1e-3

    monkeypatch.setattr(kernels, "bottom_k_means", wrong)
    assert self_check.kernels_disagree(CPU, torch.float32, 1000)[0] == (
        "the bottom_k_means kernel differs from the torch reference by 0.001"
    )
