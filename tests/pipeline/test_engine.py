import random

import numpy as np
import pytest
import torch
from conftest import benchmark_module, random_sentence
from helpers import ALL_KS, ONE_PASS_METHODS, assert_scores_close

from mia_fast import ComputeConfig, DcpddSettings, Detector, ModelConfig, load_model
from mia_fast.errors import MiaFastError
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.tokens.tokenize import split_windows, tokenize

public_loop_scores = benchmark_module("reference_loop").public_loop_scores


# ---- start token ----


def test_prepend_start_scores_the_first_token(tiny_loaded):
    engine_on = StatsEngine(tiny_loaded, prepend_start=True)
    engine_off = StatsEngine(tiny_loaded, prepend_start=False)
    text = ["the quick brown fox"]
    n_ids = len(tokenize(tiny_loaded.tokenizer, text, prepend_start=False)[0])
    assert engine_on.compute(text).lengths[0] == n_ids
    assert engine_off.compute(text).lengths[0] == n_ids - 1


# ---- windows ----


def test_windowed_scores_equal_direct_forward_on_each_window(tiny_loaded):
    engine = StatsEngine(tiny_loaded, max_length=16, batch_tokens=64)
    text = random_sentence(random.Random(1), 30)
    ids = engine.tokenize([text])[0]
    stats = engine.compute([text])
    assert stats.lengths[0] == len(ids) - 1
    expected_logp = []
    for w in split_windows(0, len(ids), 16):
        window = torch.tensor([ids[w.begin : w.end]])
        with torch.inference_mode():
            logits = tiny_loaded.model(window).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        for t in range(w.first_target, w.end):
            expected_logp.append(logp[t - w.begin - 1, ids[t]].item())
    np.testing.assert_allclose(stats.logp, expected_logp, rtol=1e-5, atol=1e-5)


def test_text_longer_than_context_is_windowed_by_default(tiny_loaded):
    engine = StatsEngine(tiny_loaded)
    assert engine.max_length == 64
    long_text = random_sentence(random.Random(2), 200)
    n_ids = len(engine.tokenize([long_text])[0])
    assert n_ids > 64
    assert engine.compute([long_text]).lengths[0] == n_ids - 1


def test_max_length_beyond_context_is_refused(tiny_loaded):
    with pytest.raises(MiaFastError, match="exceeds the model context 64"):
        StatsEngine(tiny_loaded, max_length=65)


# ---- exactness ----


def test_hidden_state_path_equals_full_logits_path(tiny_loaded, mixed_texts):
    via_head = StatsEngine(tiny_loaded, batch_tokens=256).compute(mixed_texts)
    via_logits = StatsEngine(tiny_loaded, batch_tokens=256, use_hidden_states=False).compute(mixed_texts)
    assert via_head.lengths.tolist() == via_logits.lengths.tolist()
    for name in ("logp", "mu", "var"):
        np.testing.assert_allclose(getattr(via_head, name), getattr(via_logits, name), rtol=1e-5, atol=1e-5)


def test_soft_capped_head_falls_back_to_full_forward(tmp_path):
    from conftest import train_tokenizer
    from transformers import Gemma2Config, Gemma2ForCausalLM

    tok = train_tokenizer({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, vocab_size=270)
    config = Gemma2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        final_logit_softcapping=5.0,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    Gemma2ForCausalLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    gemma = load_model(str(tmp_path))
    assert gemma.plain_linear_head() is None
    engine = StatsEngine(gemma)
    assert engine.head is None
    text = "the rain in spain"
    ids = engine.tokenize([text])[0]
    with torch.inference_mode():
        logits = gemma.model(torch.tensor([ids])).logits[0, :-1]
    assert logits.abs().max() <= 5.0  # the soft-capping is applied
    expected = torch.log_softmax(logits.double(), -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    np.testing.assert_allclose(engine.compute([text]).logp, expected, rtol=1e-5, atol=1e-5)


def test_parity_with_public_loop(tiny_model_dir, mixed_texts):
    detector = Detector(ModelConfig(str(tiny_model_dir), prepend_start=False))
    loaded = detector.target.loaded
    # The public code needs k*n >= 1 and does not window texts beyond the context.
    long_enough = [t for t in mixed_texts if 11 <= len(loaded.tokenizer.encode(t)) <= loaded.context_length]
    assert len(long_enough) >= 5
    ours = detector.score(long_enough, methods=ONE_PASS_METHODS, k=ALL_KS)
    theirs = public_loop_scores(loaded.model, loaded.tokenizer, long_enough, ALL_KS)
    assert_scores_close(dict(ours), {c: theirs[c] for c in ours}, rtol=1e-4, atol=1e-5)


def test_lowercase_and_reference_passes(tiny_model_dir, tiny_reference_dir):
    detector = Detector(ModelConfig(str(tiny_model_dir), ref_model=str(tiny_reference_dir)))
    assert detector.reference.loaded.vocab_size != detector.target.loaded.vocab_size
    texts = ["The Quick Brown Fox", "ALL THAT GLITTERS"]
    scores = detector.score(texts, methods=["loss", "lowercase", "ref"])
    lower = detector.score([t.lower() for t in texts], methods=["loss"])["loss"]
    np.testing.assert_allclose(scores["lowercase"], lower / scores["loss"], rtol=1e-6)
    ref_loss = Detector(str(tiny_reference_dir)).score(texts, methods=["loss"])["loss"]
    np.testing.assert_allclose(scores["ref"], -ref_loss + scores["loss"], rtol=1e-6)


def test_dcpdd_counts_must_match_vocabulary(tiny_model_dir):
    with pytest.raises(MiaFastError, match="vocabulary has"):
        Detector(str(tiny_model_dir), [DcpddSettings(frequencies=np.ones(7, np.int64))])


# ---- back ends ----


@pytest.mark.parametrize("use_hidden_states", [True, False])
def test_triton_backend_equals_torch_reference(tiny_loaded, mixed_texts, use_hidden_states):
    options = dict(batch_tokens=200, use_hidden_states=use_hidden_states)
    kernel = StatsEngine(tiny_loaded, backend="triton", **options)
    reference = StatsEngine(tiny_loaded, backend="torch", **options)
    assert kernel.backend == "triton" and reference.backend == "torch"
    got, expected = kernel.compute(mixed_texts), reference.compute(mixed_texts)
    assert got.lengths.tolist() == expected.lengths.tolist()
    np.testing.assert_array_equal(got.target_ids, expected.target_ids)
    for name in ("logp", "mu", "var"):
        np.testing.assert_allclose(getattr(got, name), getattr(expected, name), rtol=1e-5, atol=1e-5)


def test_triton_detector_scores_every_one_pass_method_like_the_reference(tiny_model_dir, mixed_texts):
    """Statistics and reductions (bottom-k, DC-PDD) on the kernels against the torch and numpy reference."""
    counts = np.random.default_rng(0).zipf(1.5, len(load_model(str(tiny_model_dir)).tokenizer))
    method_settings, compute = [DcpddSettings(frequencies=counts)], ComputeConfig(batch_tokens=200)
    kernel = Detector(ModelConfig(str(tiny_model_dir), backend="triton"), method_settings, compute)
    reference = Detector(ModelConfig(str(tiny_model_dir), backend="torch"), method_settings, compute)
    assert kernel.ops.backend == "triton" and reference.ops.backend == "torch"  # the reductions follow the statistics
    methods = [*ONE_PASS_METHODS, "dcpdd"]
    assert_scores_close(
        kernel.score(mixed_texts, methods, ALL_KS), reference.score(mixed_texts, methods, ALL_KS), rtol=1e-4, atol=1e-6
    )
