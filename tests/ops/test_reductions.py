"""The ``Ops`` handle: the per-text reductions on the backend and device it was made with, nothing else."""

import numpy as np
import pytest

from mia_fast.ops.reductions import REFERENCE_OPS, Ops


def test_an_ops_handle_runs_the_reductions_on_its_backend_and_device(monkeypatch):
    values, offsets = np.array([3.0, 1.0, 2.0, 5.0, 4.0], dtype=np.float32), np.array([0, 2, 5])
    assert REFERENCE_OPS == Ops("torch", None)
    np.testing.assert_array_equal(
        REFERENCE_OPS.bottom_k_means(values, offsets, [0.5, 1.0]), [[1.0, 2.0], [2.0, 11 / 3]]
    )
    asked = []
    monkeypatch.setattr("mia_fast.ops.reductions.bottom_k_means", lambda *a, **k: asked.append(k))
    Ops("triton", "cuda:1").bottom_k_means(values, offsets, [0.5])
    assert asked == [{"backend": "triton", "device": "cuda:1"}]
    with pytest.raises(ValueError, match="backend must be one of torch, triton, got 'auto'"):
        Ops("auto")


def test_an_ops_handle_gives_dcpdd_its_backend_and_device(monkeypatch):
    asked = []
    monkeypatch.setattr("mia_fast.ops.reductions.capped_first_occurrence_mean", lambda *a, **k: asked.append((a, k)))
    Ops("triton", "cuda").capped_first_occurrence_mean("ids", "logp", "first", "offsets", "log_f", 0.5)
    assert asked == [(("ids", "logp", "first", "offsets", "log_f", 0.5), {"backend": "triton", "device": "cuda"})]
