"""The Detector (scoring.detector) over the tiny model: scores equal the methods' own computation, whatever the
batch budget, in input order; empty texts are NaN with a warning; a model in memory scores as from disk; saved
TokenStats score as the model; what an engine cannot serve is refused before any work."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import ALL_KS, ONE_PASS_METHODS, assert_scores_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mia_fast import ComputeConfig, Detector, ModelConfig
from mia_fast.engines.passes import TARGET
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.scoring.detector import Scores, check_served
from mia_fast.served.model import ServedLimits


@pytest.fixture(scope="module")
def detector(tiny_model_dir):
    return Detector(str(tiny_model_dir))


def test_loss_is_the_mean_log_probability_of_each_texts_scored_tokens(detector, tiny_loaded):
    texts = ["the quick brown fox", "all that glitters is not gold"]
    scores = detector.score(texts, ["loss"])
    for text, loss, n_tokens in zip(texts, scores["loss"], scores.n_tokens):
        ids = detector.target.tokenize([text])[0]
        with torch.inference_mode():
            logp = torch.log_softmax(tiny_loaded.model(torch.tensor([ids])).logits[0, :-1].double(), -1)
        expected = logp.gather(-1, torch.tensor(ids[1:])[:, None]).mean().item()
        assert n_tokens == len(ids) - 1 and loss == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(scores["loss"], detector.token_stats(texts).mean_logp, rtol=1e-6)


def test_scores_are_a_mapping_of_columns(detector):
    scores = detector.score(["the quick brown fox"], ["loss", "mink"], k=[0.2, 0.5])
    assert isinstance(scores, Scores) and list(scores) == ["loss", "mink_0.2", "mink_0.5"] and len(scores) == 3
    assert scores["mink_0.5"].dtype == np.float64 and scores.warnings == [None] and scores.online is None


def test_saved_token_stats_score_as_the_model(detector, tmp_path):
    texts = ["the quick brown fox", "to be or not to be"]
    path = detector.token_stats(texts).save(tmp_path / "stats")
    saved = Detector.from_token_stats(path, texts)
    assert_scores_close(saved.score(texts, ["loss", "mink"], [0.5]), detector.score(texts, ["loss", "mink"], [0.5]))


def test_a_text_that_is_not_a_string_is_refused(detector):
    with pytest.raises(MiaFastError, match="every text must be a string"):
        detector.score(["a text", 3], ["loss"])


def test_a_method_an_engine_cannot_serve_is_refused_naming_what_it_needs():
    requests = resolve_methods(["loss", "minkpp"], [0.5])
    with pytest.raises(MiaFastError, match="^method 'minkpp' needs the exact mean and variance of log p"):
        check_served(requests, MethodSettings(), {TARGET: ServedLimits(has_tokenizer=True)})
    with pytest.raises(MiaFastError, match="^method 'minkpp_top5' needs the vocabulary's size"):
        check_served(resolve_methods(["minkpp_top5"], [0.5]), MethodSettings(), {TARGET: ServedLimits(False)})
    check_served(resolve_methods(["loss", "minkpp_top5"], [0.5]), MethodSettings(), {TARGET: ServedLimits(True)})


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(1, 3000))
def test_batch_budget_does_not_change_scores(tiny_model_dir, mixed_texts, budget):
    reference = _scores_with_budget(tiny_model_dir, mixed_texts, 64)
    assert_scores_close(_scores_with_budget(tiny_model_dir, mixed_texts, budget), reference)


_DETECTORS: dict = {}


def _scores_with_budget(model_dir, mixed_texts, budget):
    if str(model_dir) not in _DETECTORS:
        _DETECTORS[str(model_dir)] = Detector(str(model_dir))
    detector = _DETECTORS[str(model_dir)]
    detector.target.batch_tokens = budget
    return dict(detector.score(mixed_texts, methods=ONE_PASS_METHODS, k=ALL_KS))


def test_scores_return_in_input_order(tiny_model_dir, mixed_texts):
    detector = Detector(str(tiny_model_dir))
    together = detector.score(mixed_texts, methods=["loss"])["loss"]
    one_by_one = [detector.score([t], methods=["loss"])["loss"][0] for t in mixed_texts[:6]]
    np.testing.assert_allclose(together[:6], one_by_one, rtol=1e-5)


def test_empty_and_whitespace_texts_are_nan_with_warning(tiny_model_dir):
    scores = Detector(ModelConfig(str(tiny_model_dir), prepend_start=False)).score(
        ["", "   \n", "the fox jumps", "a"], methods=["loss", "mink"], k=[0.5]
    )
    assert np.isnan(scores["loss"][:2]).all() and np.isfinite(scores["loss"][2])
    assert scores.warnings[0] and scores.warnings[1] and scores.warnings[2] is None
    # a one-token text has nothing to score without a start token...
    assert scores.n_tokens[3] == 0 and scores.warnings[3]
    # ...and one scored position with it
    with_start = Detector(str(tiny_model_dir)).score(["a"], methods=["loss"])
    assert with_start.n_tokens[0] == 1 and np.isfinite(with_start["loss"][0])


def test_detector_takes_a_model_already_in_memory(tiny_loaded, tiny_model_dir, mixed_texts):
    in_memory = Detector(ModelConfig(tiny_loaded, ref_model=tiny_loaded), compute=ComputeConfig(batch_tokens=200))
    assert in_memory.target.loaded is tiny_loaded and in_memory.reference.loaded is tiny_loaded
    from_disk = Detector(str(tiny_model_dir), compute=ComputeConfig(batch_tokens=200))
    assert_scores_close(
        in_memory.score(mixed_texts, ONE_PASS_METHODS, ALL_KS),
        from_disk.score(mixed_texts, ONE_PASS_METHODS, ALL_KS),
        rtol=1e-6,
    )
