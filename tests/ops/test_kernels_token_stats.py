"""The token-statistics Triton kernel (``kernels/token_stats.py``) against the torch reference and an fp64 ground
truth (interpreter on CPU), at every autotune config.

Accuracy bar (cut-cross-entropy): |kernel - fp64| <= |eager same-dtype - fp64| + 1e-5, elementwise,
where "eager" is the public code's recipe run in the input dtype (max log p: Gap-K%'s, the max of log_softmax).
"""

import importlib

import numpy as np
import pytest
import torch
import triton
from hypothesis import given, settings
from hypothesis import strategies as st

from mia_fast.engines.stats import TOKEN_STATS_COLUMNS
from mia_fast.kernels import token_stats
from mia_fast.kernels.token_stats import (
    MAX_ROWS_BUCKET,
    TOKEN_STATS_CONFIGS,
    default_config,
    fitting_configs,
    rows_bucket,
    token_stats_with_config,
)
from mia_fast.ops.token_stats import token_stats_torch

pytestmark = pytest.mark.lower_bounds

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def ground_truth(logits: torch.Tensor, targets: torch.Tensor):
    """fp64 logp, mu, var, max logp of the logits exactly as given (after their rounding to the input dtype)."""
    logprobs = torch.log_softmax(logits.double(), -1)
    probs = logprobs.exp()
    mu = torch.where(probs > 0, probs * logprobs, 0).sum(-1)
    var = torch.where(probs > 0, probs * (logprobs - mu[..., None]) ** 2, 0).sum(-1)
    return logprobs.gather(-1, targets[..., None])[..., 0], mu, var, logprobs.amax(-1)


def eager(logits: torch.Tensor, targets: torch.Tensor):
    """The public Min-K%++ recipe, in the logits' own dtype."""
    probs = torch.softmax(logits, -1)
    logprobs = torch.log_softmax(logits, -1)
    mu = (probs * logprobs).sum(-1)
    var = (probs * logprobs.square()).sum(-1) - mu.square()
    return logprobs.gather(-1, targets[..., None])[..., 0], mu, var, logprobs.amax(-1)


def varied_logits(n: int, vocab: int, seed: int) -> torch.Tensor:
    """Rows from flat to fully peaked, with very negative logits mixed in."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=g) * torch.linspace(0.05, 12, n)[:, None]
    logits[0] = 0.0  # exactly uniform
    if n > 2:
        logits[1] = -30.0
        logits[1, vocab // 3] = 40.0  # one token takes (almost) all the mass
        logits[2, : vocab // 2] -= 1e4  # half the vocabulary is effectively impossible
    return logits


def assert_accuracy_bar(logits: torch.Tensor, targets: torch.Tensor, got) -> None:
    truth = ground_truth(logits, targets)
    baseline = eager(logits, targets)
    for name, g, b, t in zip(TOKEN_STATS_COLUMNS, got, baseline, truth, strict=True):
        kernel_error = (g.double() - t).abs()
        eager_error = (b.double() - t).abs().nan_to_num(nan=float("inf"))
        worst = (kernel_error - eager_error - 1e-5).max().item()
        assert worst <= 0, f"{name}: kernel exceeds the eager error by {worst:.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, vocab", [(1, 7), (13, 1000), (9, 4099), (5, 50257)])
def test_token_stats_accuracy_bar(n, vocab, dtype):
    logits = varied_logits(n, vocab, seed=vocab).to(dtype).to(DEVICE)
    targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).to(DEVICE)
    assert_accuracy_bar(logits, targets, token_stats(logits, targets))


def test_token_stats_large_vocabulary_bf16():
    logits = varied_logits(3, 151936, seed=1).to(torch.bfloat16).to(DEVICE)
    targets = torch.tensor([5, 151935, 70000], device=DEVICE)
    assert_accuracy_bar(logits, targets, token_stats(logits, targets))


@pytest.mark.parametrize("dtype", DTYPES)
def test_token_stats_match_torch_reference(dtype):
    logits = varied_logits(11, 3001, seed=3).to(dtype).to(DEVICE)
    targets = torch.randint(0, 3001, (11,)).to(DEVICE)
    for got, ref in zip(token_stats(logits, targets), token_stats_torch(logits, targets), strict=True):
        np.testing.assert_allclose(got.cpu(), ref.cpu(), rtol=1e-5, atol=2e-5)


def test_minus_inf_logits_stay_finite_and_exact():
    logits = torch.randn(4, 5000)
    logits[0, :4000] = -float("inf")
    logits[1, 1:] = -float("inf")  # a single possible token: logp 0, mu 0, var 0
    targets = torch.tensor([4500, 0, 17, 4999])
    got = token_stats(logits.to(DEVICE), targets.to(DEVICE))
    for g, t in zip(got, ground_truth(logits, targets), strict=True):
        assert torch.isfinite(g).all()
        np.testing.assert_allclose(g.cpu(), t, rtol=1e-5, atol=1e-5)


def test_ignored_rows_give_zero_sentinels():
    logits = torch.randn(6, 333).to(DEVICE)
    targets = torch.tensor([1, -100, 2, -100, 3, 4]).to(DEVICE)
    logp, *others = token_stats(logits, targets)
    for value in (logp, *others):
        assert (value[targets == -100] == 0).all()
    np.testing.assert_allclose(
        logp[targets != -100].cpu(),
        ground_truth(logits.cpu()[targets.cpu() != -100], targets.cpu()[targets.cpu() != -100])[0],
        rtol=1e-5,
        atol=1e-5,
    )


def test_leading_shape_and_row_stride():
    wide = torch.randn(2, 5, 777 + 9)
    logits = wide[..., :777]  # rows of 777 with a stride of 786
    targets = torch.randint(0, 777, (2, 5))
    got = token_stats(logits.to(DEVICE), targets.to(DEVICE))
    assert all(value.shape == (2, 5) for value in got)
    for g, t in zip(got, ground_truth(logits, targets), strict=True):
        np.testing.assert_allclose(g.cpu(), t, rtol=1e-5, atol=1e-5)


def test_bad_targets_and_dtypes_are_refused():
    with pytest.raises(ValueError, match="target ids must lie in"):
        token_stats(torch.randn(2, 10), torch.tensor([3, 10]))
    with pytest.raises(TypeError, match="fp32, bf16 or fp16"):
        token_stats(torch.randn(2, 10, dtype=torch.float64), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="does not match"):
        token_stats(torch.randn(2, 10), torch.tensor([3]))


CONFIG_IDS = [
    f"rows{c.kwargs['ROWS']}-block{c.kwargs['BLOCK_V']}-chunk{c.kwargs['CHUNK']}-warps{c.num_warps}"
    for c in TOKEN_STATS_CONFIGS
]
# |kernel - fp64| <= FP64_TOLERANCE * (1 + |fp64|): room for the GPU's exp2 and rsqrt approximations, far
# below the eager recipe's error in bf16 or fp16.
FP64_TOLERANCE = 5e-6


def assert_near_fp64(logits: torch.Tensor, targets: torch.Tensor, got) -> None:
    for name, g, t in zip(TOKEN_STATS_COLUMNS, got, ground_truth(logits, targets), strict=True):
        assert torch.isfinite(g).all(), name
        worst = ((g.cpu().double() - t).abs() / (1 + t.abs())).max().item()
        assert worst <= FP64_TOLERANCE, f"{name}: {worst:.3g} off fp64"


def special_rows(vocab: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Peaked rows and rows with -inf (or the dtype's lowest) logits, each with a finite target."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(7, vocab, generator=g) * torch.tensor([2.0, 2.0, 1.0, 3.0, 3.0, 3.0, 0.5])[:, None]
    targets = torch.randint(0, vocab, (7,), generator=g)
    logits[0, targets[0]] = 60.0  # the target takes all the mass
    logits[1, vocab // 2] = 60.0  # another token does
    logits[2] = -float("inf")
    logits[2, targets[2]] = 1.5  # the only possible token: logp 0, mu 0, var 0
    logits[3, : vocab // 2] = -float("inf")
    targets[3] = vocab - 1
    logits[4, vocab // 3 :] = -float("inf")
    targets[4] = 0
    logits[5, 1::3] = -float("inf")
    targets[5] = 0
    logits[6, ::2] = torch.finfo(dtype).min  # a masking value some models use instead of -inf
    targets[6] = 1
    return logits.to(dtype), targets


@pytest.mark.parametrize("config", TOKEN_STATS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_config_is_near_fp64_at_odd_shapes(config, dtype):
    # V below every block, V just past a block, rows that no ROWS divides, and a single row.
    for n, vocab in ((3, 200), (7, 4099), (1, 777), (9, 1000)):
        logits = varied_logits(n, vocab, seed=vocab).to(dtype).to(DEVICE)
        targets = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).to(DEVICE)
        got = token_stats_with_config(logits, targets, config)
        assert_near_fp64(logits.cpu(), targets.cpu(), got)
        assert_accuracy_bar(logits.cpu(), targets.cpu(), [value.cpu() for value in got])


@pytest.mark.parametrize("config", TOKEN_STATS_CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_config_is_near_fp64_on_peaked_and_minus_inf_rows(config, dtype):
    logits, targets = special_rows(3001, dtype, seed=5)
    got = token_stats_with_config(logits.to(DEVICE), targets.to(DEVICE), config)
    assert_near_fp64(logits, targets, got)
    assert_accuracy_bar(logits, targets, [value.cpu() for value in got])
    np.testing.assert_allclose([value[2].item() for value in got], 0.0, atol=1e-6)


def test_every_config_is_near_fp64_at_a_large_bf16_vocabulary():
    peaked = special_rows(151936, torch.bfloat16, seed=8)[0][:2]
    logits = torch.cat([varied_logits(3, 151936, seed=7).to(torch.bfloat16), peaked])
    targets = torch.tensor([5, 151935, 70000, 3, 7])
    for config in TOKEN_STATS_CONFIGS:
        got = token_stats_with_config(logits.to(DEVICE), targets.to(DEVICE), config)
        assert_near_fp64(logits, targets, got)
        assert_accuracy_bar(logits, targets, [value.cpu() for value in got])


@settings(max_examples=30, deadline=None)
@given(
    config=st.sampled_from(TOKEN_STATS_CONFIGS),
    dtype=st.sampled_from(DTYPES),
    vocab=st.integers(1, 600),
    n=st.integers(1, 11),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_a_rows_stats_do_not_depend_on_the_rows_beside_it(config, dtype, vocab, n, seed, data):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=g) * torch.rand(n, 1, generator=g) * 20
    logits[torch.rand(n, vocab, generator=g) < 0.2] = -float("inf")
    targets = torch.randint(0, vocab, (n,), generator=g)
    logits[torch.arange(n), targets] = 0.0
    targets[torch.rand(n, generator=g) < 0.2] = -100
    logits, targets = logits.to(dtype).to(DEVICE), targets.to(DEVICE)
    order = torch.tensor(data.draw(st.permutations(range(n))), device=DEVICE)
    row = data.draw(st.integers(0, n - 1))
    together = token_stats_with_config(logits, targets, config)
    shuffled = token_stats_with_config(logits[order], targets[order], config)
    alone = token_stats_with_config(logits[row : row + 1], targets[row : row + 1], config)
    for all_rows, reordered, single in zip(together, shuffled, alone, strict=True):
        torch.testing.assert_close(all_rows[order], reordered, rtol=0, atol=0)
        torch.testing.assert_close(all_rows[row : row + 1], single, rtol=0, atol=0)


def test_the_autotune_space_takes_64_logits_a_thread_at_large_vocabularies():
    # 64 logits a thread a block: under 12 SASS instructions a logit (tests/ops/test_kernels_compile.py).
    for vocab in (4099, 50257, 151936):
        config = default_config(vocab)
        assert (config.kwargs, config.num_warps) == ({"ROWS": 1, "BLOCK_V": 8192, "CHUNK": 64}, 4)
    for config in TOKEN_STATS_CONFIGS:
        assert config.kwargs["BLOCK_V"] == 32 * config.num_warps * config.kwargs["CHUNK"]
    assert fitting_configs(151936) == [c for c in TOKEN_STATS_CONFIGS if c.kwargs["CHUNK"] == 64]  # <= 75 merges
    assert fitting_configs(32000) == list(TOKEN_STATS_CONFIGS)
    small = fitting_configs(1000)
    assert small and all(c.kwargs["BLOCK_V"] <= 1024 and c.kwargs["CHUNK"] == 8 for c in small)
    assert all(c.kwargs["ROWS"] == 1 for c in TOKEN_STATS_CONFIGS)  # several rows a program spilled
    assert fitting_configs(7) == [min(TOKEN_STATS_CONFIGS, key=lambda c: c.kwargs["BLOCK_V"])]


@pytest.mark.skipif(
    DEVICE != "cuda" and tuple(int(part) for part in triton.__version__.split(".")[:2]) < (3, 9),
    reason="Triton's interpreter before 3.9 computes tl.fma unfused; the figures are a fused fma's, as on a GPU",
)
def test_bf16_errors_at_151936_are_within_the_issues_figures():
    # Issue 57's max abs errors against fp64 (bf16, V = 151936, rows without huge-magnitude logits), which the
    # former per-logit-merge kernel reached: logp 5.9e-7, mu 9.2e-7, var 7.1e-7.
    vocab = 151936
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(7, vocab, generator=g) * torch.tensor([0.0, 1.0, 0.5, 1.0, 2.0, 3.0, 2.0])[:, None]
    logits[1] = -30.0
    logits[1, vocab // 3] = 40.0  # one token takes (almost) all the mass
    logits[6, 1234] = 60.0
    logits = logits.to(torch.bfloat16)
    # Row 5's target is its top token: a logp beyond -16 rounds to fp32 by up to 9.5e-7 on its own (at target 77,
    # logp = -17.8, the error is 6.4e-7, that rounding).
    targets = torch.tensor([5, vocab // 3, 70000, 3, vocab - 1, int(logits[5].argmax()), 1234])
    got = token_stats_with_config(logits.to(DEVICE), targets.to(DEVICE), default_config(vocab))
    figures = {"logp": 5.9e-7, "mu": 9.2e-7, "var": 7.1e-7}
    for name, g, t in zip(TOKEN_STATS_COLUMNS, got, ground_truth(logits, targets), strict=True):
        if name in figures:
            error = (g.cpu().double() - t).abs().max().item()
            assert error <= figures[name], f"{name}: {error:.3g} off fp64"


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU the autotuner picks the config")
def test_the_interpreter_runs_the_default_config():
    logits = varied_logits(5, 3001, seed=9)
    targets = torch.randint(0, 3001, (5,))
    expected = token_stats_with_config(logits, targets, default_config(3001))
    for got, want in zip(token_stats(logits, targets), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU the autotuner times the configs for real")
def test_the_autotuned_launch_runs_the_fastest_fitting_config(monkeypatch):
    kernel_module = importlib.import_module("mia_fast.kernels.token_stats")
    autotuner = kernel_module._token_stats_autotuned
    timed = []

    def later_is_faster(kernel_call, quantiles):
        kernel_call()
        timed.append(-len(timed))
        return [float(timed[-1])] * len(quantiles)

    monkeypatch.setattr(kernel_module, "_CAN_AUTOTUNE", True)
    monkeypatch.setitem(vars(autotuner), "do_bench", later_is_faster)  # getattr would look for a GPU
    monkeypatch.setattr(autotuner, "cache", {})
    logits = varied_logits(13, 1000, seed=11).to(torch.bfloat16)
    targets = torch.randint(0, 1000, (13,), generator=torch.Generator().manual_seed(11))
    got = token_stats(logits, targets)
    assert len(timed) == len(fitting_configs(1000))
    assert autotuner.best_config is fitting_configs(1000)[-1]
    for value, expected in zip(got, token_stats_with_config(logits, targets, autotuner.best_config), strict=True):
        torch.testing.assert_close(value, expected, rtol=0, atol=0)


def test_the_autotune_key_buckets_the_row_count():
    assert [rows_bucket(n) for n in (1, 3, 4, 5, 4096, 4097)] == [1, 4, 4, 8, 4096, 8192]
    assert rows_bucket(10**8) == MAX_ROWS_BUCKET
    autotuner = importlib.import_module("mia_fast.kernels.token_stats")._token_stats_autotuned
    assert autotuner.keys == ["vocab_size", "rows_bucket"]


@pytest.mark.skipif(DEVICE == "cuda", reason="on a GPU the autotuner times the configs for real")
def test_the_autotuner_chooses_again_for_another_row_bucket(monkeypatch):
    kernel_module = importlib.import_module("mia_fast.kernels.token_stats")
    autotuner = kernel_module._token_stats_autotuned
    timed = []

    def first_is_faster(kernel_call, quantiles):
        kernel_call()
        timed.append(len(timed))
        return [float(timed[-1])] * len(quantiles)

    monkeypatch.setattr(kernel_module, "_CAN_AUTOTUNE", True)
    monkeypatch.setitem(vars(autotuner), "do_bench", first_is_faster)
    monkeypatch.setattr(autotuner, "cache", {})
    for n in (3, 4, 40):  # buckets 4, 4, 64
        logits = varied_logits(n, 1000, seed=n)
        token_stats(logits, torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(n)))
    assert len(timed) == 2 * len(fitting_configs(1000))
    assert len(autotuner.cache) == 2


def test_the_launcher_takes_the_nvidia_forms_only_on_an_nvidia_gpu(monkeypatch):
    kernel_module = importlib.import_module("mia_fast.kernels.token_stats")
    monkeypatch.setattr(kernel_module, "INTERPRETED", True)
    assert not kernel_module.nvidia_forms()
    monkeypatch.setattr(kernel_module, "INTERPRETED", False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert kernel_module.nvidia_forms()
    monkeypatch.setattr(torch.version, "hip", "6.4.0")  # ROCm's torch names its GPUs "cuda" too
    assert not kernel_module.nvidia_forms()
