"""The tokens of the target and of the reference model paired by the characters they cover (what ezmia and wbc
read), the token-span readout, and both attacks end to end on tiny models."""

import re
import warnings

import numpy as np
import pytest
from helpers import paired_inputs, paired_stats, span_lists, word_spans

from mia_fast import Detector, ModelConfig
from mia_fast.engines.passes import TOKEN_SPANS
from mia_fast.engines.stored import CacheOnlyEngine
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.methods.ezmia import MEMBER_OUTRIGHT
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.methods.reference_tokens import REFERENCE_SPANS, TARGET_SPANS, align_spans, paired_tokens
from mia_fast.pipeline.models import load_model
from mia_fast.served.model import served_refusal
from mia_fast.tokens.tokenize import token_spans, tokenize

TEXTS = ["the quick brown fox jumps over the lazy dog", "Zhōngwén 中文 文本 也 可以 被 分词", "a", ""]


def test_equal_spans_pair_one_to_one():
    same = np.array([(0, 0), (0, 3), (3, 4), (3, 4), (4, 9)])  # an empty special-token span, two byte pieces
    target, reference = align_spans(same, same.copy())
    np.testing.assert_array_equal(target, np.arange(5))
    np.testing.assert_array_equal(reference, np.arange(5))


def test_different_splits_pair_only_tokens_with_the_same_characters():
    target = np.array([(0, 3), (3, 9), (9, 10), (9, 10), (10, 12), (12, 13), (12, 13)])
    reference = np.array([(0, 3), (3, 5), (5, 9), (9, 10), (9, 10), (10, 11), (11, 12), (12, 13)])
    mine, theirs = align_spans(target, reference)
    # (0, 3) once each; the two pieces of (9, 10) in order; (3, 9) and (10, 12) have no twin; (12, 13) is two
    # pieces here but one token there: not paired.
    assert list(zip(mine.tolist(), theirs.tolist())) == [(0, 0), (2, 3), (3, 4)]
    empty = align_spans(np.zeros((0, 2), np.int64), np.array([(0, 1)]))
    assert empty[0].shape == (0,) and empty[1].shape == (0,)


def test_paired_tokens_counts_and_warns_and_refuses():
    target = paired_stats({"logp": [-1, -2, -3]}, {"logp": [-4]}, {"logp": []})
    reference = paired_stats({"logp": [-1, -2]}, {"logp": [-5, -6]}, {"logp": []})
    given = paired_inputs(
        target,
        reference,
        span_lists([(0, 2), (2, 4), (4, 5)], [(0, 3)], []),
        span_lists([(0, 2), (2, 5)], [(0, 1), (1, 3)], []),
    )
    share = r"^wbc: 1 of the target's 4 scored tokens \(25\.0%\) .* \(1 text\(s\) with none score NaN\)$"
    with pytest.warns(MiaFastWarning, match=share):
        pairs = paired_tokens(given, "wbc")
    np.testing.assert_array_equal(pairs.offsets, [0, 1, 1, 1])
    assert pairs.target.tolist() == [0] and pairs.reference.tolist() == [0]
    none_pair = paired_inputs(
        target,
        reference,
        span_lists([(0, 2), (2, 3), (3, 5)], [(0, 3)], []),
        span_lists(word_spans(2), word_spans(2), []),
    )
    with pytest.raises(MiaFastError, match="^ezmia: none of the target's 4 scored tokens covers the same characters"):
        paired_tokens(none_pair, "ezmia")
    with pytest.raises(MiaFastError, match="token spans do not match"):
        paired_tokens(
            paired_inputs(
                target, reference, span_lists(word_spans(2), [(0, 3)], []), span_lists(word_spans(2), word_spans(2), [])
            ),
            "wbc",
        )


def test_one_tokenizer_pairs_everything_without_a_warning():
    target = paired_stats({"logp": [-1, -2, -3]}, {"logp": []})
    same = span_lists(word_spans(3), [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = paired_tokens(paired_inputs(target, target, same, same), "wbc")
    assert pairs.target.tolist() == pairs.reference.tolist() == [0, 1, 2]


def test_token_spans_cover_each_scored_token_of_the_plain_pass(tiny_model_dir):
    tokenizer = load_model(str(tiny_model_dir), device="cpu", dtype="fp32").tokenizer
    for prepend_start in (True, False):
        ids = tokenize(tokenizer, TEXTS, prepend_start=prepend_start)
        found = token_spans(tokenizer, TEXTS, prepend_start=prepend_start)
        for text, text_ids, text_spans in zip(TEXTS, ids, found):
            assert text_spans.shape == (max(len(text_ids) - 1, 0), 2)
            # In order, they cover the text after the unscored first id (byte pieces of a character overlap on it).
            assert (np.diff(text_spans, axis=0) >= 0).all()
            covered = np.zeros(len(text), bool)
            for a, b in text_spans.tolist():
                covered[a:b] = True
            unscored = "" if prepend_start else tokenizer.decode(text_ids[:1])
            assert covered.tolist() == [i >= len(unscored) for i in range(len(text))]
        # Each whole token of plain text spans exactly its own characters.
        scored = ids[0][-len(found[0]) :]
        assert [TEXTS[0][a:b] for a, b in found[0].tolist()] == [tokenizer.decode([i]) for i in scored]
    with pytest.raises(MiaFastError, match="is not a fast tokenizer"):
        token_spans(object(), TEXTS, prepend_start=False)


def test_engines_that_cannot_give_spans_say_so_in_one_line():
    assert "give --tokenizer NAME" in served_refusal(TOKEN_SPANS, has_tokenizer=False)
    assert served_refusal(TOKEN_SPANS, has_tokenizer=True) is None
    line = CacheOnlyEngine.refusal(None, TOKEN_SPANS)
    assert "token statistics do not hold" in line and "\n" not in line


def test_one_tokenizer_two_models_and_the_passes_run_once(tiny_model_dir, monkeypatch):
    loaded = load_model(str(tiny_model_dir), device="cpu", dtype="fp32")
    detector = Detector(ModelConfig(loaded, ref_model=str(tiny_model_dir), dtype="fp32", device="cpu"))
    calls = []
    for engine in detector.engines.values():
        original = engine.token_spans
        monkeypatch.setattr(engine, "token_spans", lambda texts, original=original: calls.append(1) or original(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MiaFastWarning)
        got = detector.score([*TEXTS, TEXTS[0]], methods=["ezmia", "wbc"])
    assert len(calls) == 2  # one tokenization with offsets per model, for both methods and the repeated text
    assert got["wbc"][-1] == got["wbc"][0] and got["ezmia"][-1] == got["ezmia"][0]
    # The same weights: nothing moved, so no window votes and every text is a member outright for EZ-MIA.
    np.testing.assert_array_equal(got["wbc"][:3], 0.0)
    np.testing.assert_array_equal(got["ezmia"][:3], MEMBER_OUTRIGHT)
    assert np.isnan(got["wbc"][3]) and np.isnan(got["ezmia"][3])


def test_two_tokenizers_pair_tokens_by_characters(tiny_model_dir, tiny_reference_dir):
    detector = Detector(ModelConfig(str(tiny_model_dir), ref_model=str(tiny_reference_dir), dtype="fp32", device="cpu"))
    with pytest.warns(MiaFastWarning) as caught:
        got = detector.score([*TEXTS, TEXTS[1]], methods=["ezmia", "wbc"])
    share = r"(\w+): (\d+) of the target's (\d+) scored tokens \(.*%\) .*"
    shares = [re.fullmatch(share, str(w.message)) for w in caught]
    assert [m[1] for m in shares] == ["ezmia", "wbc"] and shares[0].group(2, 3) == shares[1].group(2, 3)
    assert np.isfinite(got["ezmia"][:3]).all() and ((0 <= got["wbc"][:3]) & (got["wbc"][:3] <= 1)).all()
    assert got["ezmia"][-1] == got["ezmia"][1] and got["wbc"][-1] == got["wbc"][1]  # a repeated text, run once
    target, reference = detector.target, detector.reference
    passes = {
        REFERENCE_PASS: reference.compute(TEXTS[:1]),
        TARGET_SPANS: target.token_spans(TEXTS[:1]),
        REFERENCE_SPANS: reference.token_spans(TEXTS[:1]),
    }
    with pytest.warns(MiaFastWarning):
        pairs = paired_tokens(ScoringInputs(target.compute(TEXTS[:1]), passes), "wbc")
    # Every pair covers the same characters of the text under both tokenizers, and some tokens found no pair.
    mine, theirs = passes[TARGET_SPANS][0], passes[REFERENCE_SPANS][0]
    np.testing.assert_array_equal(mine[pairs.target], theirs[pairs.reference])
    assert 0 < len(pairs.target) < len(mine)
