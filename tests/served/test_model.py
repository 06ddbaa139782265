"""What is known of a served model before any request (served.model): what it cannot give, with or without
a tokenizer here, and the tokenizer loaded for it (named, or found where the server says it loaded the model)."""

import pytest

from mia_fast.engines.passes import (
    TOKEN_SPANS,
    TOKEN_STATS,
    GradientNormReadout,
    HiddenStatesReadout,
    SamplesReadout,
    TopLogprobsReadout,
)
from mia_fast.errors import MiaFastError
from mia_fast.served.client import ServerConfig
from mia_fast.served.model import ServedLimits, find_served_tokenizer, load_served_model, served_refusal

WEIGHTS = "which a server does not return: score with the weights (--model)"


@pytest.mark.parametrize("has_tokenizer", [False, True])
def test_hidden_states_and_gradients_are_refused_with_or_without_a_tokenizer(has_tokenizer):
    assert served_refusal(HiddenStatesReadout(), has_tokenizer=has_tokenizer) == f"the model's hidden states, {WEIGHTS}"
    assert served_refusal(GradientNormReadout(), has_tokenizer=has_tokenizer) == f"the model's gradients, {WEIGHTS}"


def test_top_logprobs_and_token_spans_need_a_tokenizer_here():
    refusal = served_refusal(TopLogprobsReadout(5), has_tokenizer=False)
    assert refusal.startswith("the vocabulary's size") and refusal.endswith("give --tokenizer NAME")
    assert served_refusal(TOKEN_SPANS, has_tokenizer=False).startswith("the character spans of the served tokens")
    assert served_refusal(TopLogprobsReadout(5), has_tokenizer=True) is None
    assert served_refusal(TOKEN_SPANS, has_tokenizer=True) is None


@pytest.mark.parametrize("has_tokenizer", [False, True])
def test_token_stats_and_samples_are_served(has_tokenizer):
    assert served_refusal(TOKEN_STATS, has_tokenizer=has_tokenizer) is None
    assert served_refusal(SamplesReadout(count=2), has_tokenizer=has_tokenizer) is None


def test_a_served_models_limits_refuse_as_it_does_and_give_no_vocabulary_stats_or_weights():
    for has_tokenizer in (False, True):
        limits = ServedLimits(has_tokenizer)
        assert not limits.vocabulary_stats and not limits.weights_here
        for readout in (TOKEN_STATS, TOKEN_SPANS, TopLogprobsReadout(5), HiddenStatesReadout()):
            assert limits.refusal(readout) == served_refusal(readout, has_tokenizer=has_tokenizer)


def test_the_named_tokenizer_is_loaded_with_its_vocabulary_size(tiny_model_dir):
    assert load_served_model(ServerConfig("http://127.0.0.1:1", "m")) is None
    served = load_served_model(ServerConfig("http://127.0.0.1:1", "m", tokenizer=str(tiny_model_dir)))
    assert served.name == "m" and served.vocab_size == len(served.tokenizer)
    assert served.tokenizer("the fox")["input_ids"]


def test_a_named_tokenizer_that_is_not_there_is_refused(tmp_path):
    with pytest.raises(MiaFastError, match="nowhere: no such model directory"):
        load_served_model(ServerConfig("http://127.0.0.1:1", "m", tokenizer=str(tmp_path / "nowhere")))


def test_the_served_tokenizer_is_found_at_the_first_source_here(tiny_model_dir, tmp_path):
    found = find_served_tokenizer("m", ["", str(tmp_path / "nowhere"), str(tiny_model_dir)])
    assert found is not None
    served, source = found
    assert source == str(tiny_model_dir) and served.name == "m"
    assert find_served_tokenizer("m", ["", str(tmp_path / "nowhere")]) is None
