"""pytest-benchmark cases for the method and metric side (no model): the cost of scoring after the forward.

python -m pytest benchmarks/test_bench_methods.py --benchmark-json benchmarks/results/methods-<host>.json
"""

import numpy as np
import pytest

from mia_fast import metrics
from mia_fast.engines.stats import TokenStats
from mia_fast.methods import DEFAULT_KS, DcpddSettings, LogFrequencies, MethodSettings, resolve_methods
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.scoring.method_runs import score

N_TEXTS = 10_000
VOCAB = 49_152


@pytest.fixture(scope="module")
def stats() -> TokenStats:
    """10k texts of 20..2000 tokens (about 10M scored tokens) with realistic value ranges."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 2000, N_TEXTS)
    n = int(lengths.sum())
    return TokenStats.from_texts(
        [
            {"target_ids": ids, "logp": lp, "mu": mu, "var": var}
            for ids, lp, mu, var in zip(
                np.split(rng.zipf(1.2, n) % VOCAB, np.cumsum(lengths)[:-1]),
                np.split(-rng.exponential(3.0, n).astype(np.float32), np.cumsum(lengths)[:-1]),
                np.split(-rng.uniform(0.5, 6.0, n).astype(np.float32), np.cumsum(lengths)[:-1]),
                np.split(rng.uniform(0.1, 8.0, n).astype(np.float32), np.cumsum(lengths)[:-1]),
            )
        ]
    )


def test_all_one_pass_methods_ten_ks(benchmark, stats):
    rng = np.random.default_rng(1)
    log_f = np.log(rng.dirichlet(np.ones(VOCAB)))
    settings = MethodSettings(DcpddSettings(frequencies=LogFrequencies(log_f)))
    inputs = ScoringInputs(stats=stats, texts=["x" * 100] * len(stats), settings=settings)
    requests = resolve_methods(["loss", "zlib", "mink", "minkpp", "dcpdd"], DEFAULT_KS)
    columns = benchmark(score, inputs, requests)
    assert len(columns) == 23
    benchmark.extra_info["scored_tokens"] = int(stats.offsets[-1])


def test_evaluate_with_bootstrap(benchmark):
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, 2000)
    columns = {f"m{i}": rng.normal(size=2000) + labels * 0.3 for i in range(10)}
    results = benchmark.pedantic(metrics.evaluate, args=(labels, columns), rounds=3, iterations=1)
    assert len(results) == 10
