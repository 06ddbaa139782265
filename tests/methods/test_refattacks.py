"""EZ-MIA and WBC: their formulas on hand-built TokenStats, the pairing of two tokenizers' tokens by the characters they
cover, the token-span readout, and both attacks end to end on tiny models with one tokenizer and with two."""

import re
import warnings

import numpy as np
import pytest

from mia_fast import Detector, ModelConfig, WbcSettings
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.methods import MethodSettings, ScoringInputs, resolve_methods, score
from mia_fast.methods.ezmia import MEMBER_OUTRIGHT, error_zone_ratio
from mia_fast.methods.reference import REFERENCE_PASS
from mia_fast.methods.reference_tokens import REFERENCE_SPANS, TARGET_SPANS, align_spans, paired_tokens
from mia_fast.methods.registry import setting_options
from mia_fast.methods.wbc import window_sizes, window_votes
from mia_fast.pipeline.models import load_model
from mia_fast.pipeline.passes import TOKEN_SPANS
from mia_fast.pipeline.server import served_refusal
from mia_fast.pipeline.stats import TokenStats
from mia_fast.pipeline.stats_cache import CacheOnlyEngine
from mia_fast.pipeline.tokenize import token_spans, tokenize

TEXTS = ["the quick brown fox jumps over the lazy dog", "Zhōngwén 中文 文本 也 可以 被 分词", "a", ""]


def stats(*texts: dict) -> TokenStats:
    """TokenStats from per-text ``logp`` (and ``max_logp``) lists."""
    return TokenStats.from_texts(
        [
            {
                "target_ids": np.arange(len(t["logp"])),
                "logp": np.array(t["logp"], np.float32),
                "mu": np.zeros(len(t["logp"]), np.float32),
                "var": np.ones(len(t["logp"]), np.float32),
                "max_logp": np.array(t.get("max_logp", t["logp"]), np.float32),
            }
            for t in texts
        ]
    )


def spans(*per_text: list) -> np.ndarray:
    out = np.empty(len(per_text), dtype=object)
    for i, text in enumerate(per_text):
        out[i] = np.array(text, np.int64).reshape(-1, 2)
    return out


def inputs(target: TokenStats, reference: TokenStats, target_spans, reference_spans, settings=()) -> ScoringInputs:
    passes = {REFERENCE_PASS: reference, TARGET_SPANS: target_spans, REFERENCE_SPANS: reference_spans}
    return ScoringInputs(target, passes, texts=["x"] * len(target), settings=MethodSettings(*settings))


def words(n: int) -> list:
    return [(i, i + 1) for i in range(n)]


# ---- pairing tokens by the characters they cover ----


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
    target = stats({"logp": [-1, -2, -3]}, {"logp": [-4]}, {"logp": []})
    reference = stats({"logp": [-1, -2]}, {"logp": [-5, -6]}, {"logp": []})
    given = inputs(
        target,
        reference,
        spans([(0, 2), (2, 4), (4, 5)], [(0, 3)], []),
        spans([(0, 2), (2, 5)], [(0, 1), (1, 3)], []),
    )
    share = r"^wbc: 1 of the target's 4 scored tokens \(25\.0%\) .* \(1 text\(s\) with none score NaN\)$"
    with pytest.warns(MiaFastWarning, match=share):
        pairs = paired_tokens(given, "wbc")
    np.testing.assert_array_equal(pairs.offsets, [0, 1, 1, 1])
    assert pairs.target.tolist() == [0] and pairs.reference.tolist() == [0]
    none_pair = inputs(target, reference, spans([(0, 2), (2, 3), (3, 5)], [(0, 3)], []), spans(words(2), words(2), []))
    with pytest.raises(MiaFastError, match="^ezmia: none of the target's 4 scored tokens covers the same characters"):
        paired_tokens(none_pair, "ezmia")
    with pytest.raises(MiaFastError, match="token spans do not match"):
        paired_tokens(inputs(target, reference, spans(words(2), [(0, 3)], []), spans(words(2), words(2), [])), "wbc")


def test_one_tokenizer_pairs_everything_without_a_warning():
    target = stats({"logp": [-1, -2, -3]}, {"logp": []})
    same = spans(words(3), [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = paired_tokens(inputs(target, target, same, same), "wbc")
    assert pairs.target.tolist() == pairs.reference.tolist() == [0, 1, 2]


# ---- EZ-MIA ----


def test_ezmia_ratio_by_hand():
    # Token 0 and token 3 are the target's own top choice (logp == max_logp): their large shifts are not read.
    target = stats(
        {"logp": [-0.1, -2.0, -3.0, -1.5], "max_logp": [-0.1, -0.5, -0.2, -1.5]},
        {"logp": [-2.0, -1.0], "max_logp": [-0.5, -0.2]},
    )
    reference = stats({"logp": [-5.0, -2.5, -2.0, -9.0]}, {"logp": [-2.25, -1.5]})
    given = inputs(target, reference, spans(words(4), words(2)), spans(words(4), words(2)))
    got = score(given, resolve_methods(["ezmia"]))["ezmia"]
    # Text 0: shifts +0.5 and -1.0 at the mispredicted tokens: P / N = 0.5. Text 1: +0.25 and +0.5: N = 0.
    assert got[0] == pytest.approx(0.5)
    assert got[1] == pytest.approx(MEMBER_OUTRIGHT * (1 + 0.75 / 1.75))
    assert np.isfinite(got).all()


def test_ezmia_texts_with_no_downward_shift_rank_above_every_ratio_and_by_their_upward_mass():
    offsets = np.array([0, 2, 4, 6, 8, 10, 10])
    target = np.array([-3.0] * 8 + [-1.0, -1.0])
    top = np.array([-1.0] * 10)  # the fifth text's tokens are the target's top choices
    reference = np.array([-3.0 - 1e6, -3.0 + 1e-6, -4.0, -5.0, -3.5, -3.0, -3.0, -3.0, -9.0, -9.0])
    got = error_zone_ratio(target, top, reference, offsets)
    # A huge ratio, then (no downward shift) P = 3, P = 0.5, none moved, nothing mispredicted, no token.
    assert got[0] == pytest.approx(1e6 / 1e-6, rel=1e-2)
    assert got[1] > got[2] > got[3] == got[4] == MEMBER_OUTRIGHT > got[0]
    assert np.isfinite(got[:5]).all() and np.isnan(got[5])


def test_ezmia_refuses_statistics_without_the_top_choice():
    target = TokenStats.from_texts([{"target_ids": np.arange(2), "logp": [-1.0, -2.0], "mu": [0, 0], "var": [1, 1]}])
    given = inputs(target, stats({"logp": [-1, -1]}), spans(words(2)), spans(words(2)))
    with pytest.raises(MiaFastError, match="ezmia needs the log-prob of the target's own top choice"):
        score(given, resolve_methods(["ezmia"]))


# ---- WBC ----


def test_wbc_window_votes_by_hand():
    target_loss = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    reference_loss = np.array([2.0, 1.0, 5.0, 3.0, 5.0])
    offsets = np.array([0, 3, 5, 5])
    # Text 0, windows of 2: sums 3 vs 3 (a tie is no vote) and 5 vs 6. Text 1 (2 tokens): 8 vs 8.
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 2), [0.5, 0.0, np.nan])
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 1), [2 / 3, 0.5, np.nan])
    # A window longer than a text is one window of all of it: 6 vs 8, 8 vs 8.
    np.testing.assert_allclose(window_votes(target_loss, reference_loss, offsets, 5), [1.0, 0.0, np.nan])


def test_wbc_averages_the_window_sizes_and_a_lower_target_loss_means_member():
    target = stats({"logp": [-1.0, -2.0, -3.0]}, {"logp": [-0.5, -0.5, -0.5]})
    reference = stats({"logp": [-2.0, -1.0, -5.0]}, {"logp": [-0.4, -0.4, -0.4]})
    given = inputs(target, reference, spans(words(3), words(3)), spans(words(3), words(3)), [WbcSettings((1, 2, 5))])
    got = score(given, resolve_methods(["wbc"]))["wbc"]
    # Text 0: 2/3 (windows of 1), 1/2 (of 2: 3 vs 3, 5 vs 6), 1 (all: 6 vs 8). Text 1: the target's loss is higher.
    np.testing.assert_allclose(got, [(2 / 3 + 1 / 2 + 1) / 3, 0.0])
    default = score(inputs(target, reference, *(spans(words(3), words(3)),) * 2), resolve_methods(["wbc"]))["wbc"]
    np.testing.assert_allclose(default, [(2 / 3 + 1 + 1 + 1) / 4, 0.0])  # windows 1, 5, 10, 20


def test_wbc_windows_setting_and_flag():
    assert WbcSettings().windows == (1, 5, 10, 20)
    assert window_sizes("3,30,") == (3, 30) and WbcSettings([2, 4]).windows == (2, 4)
    for bad in ((), (0,), (2, 1.5)):
        with pytest.raises(MiaFastError, match=r"WbcSettings.windows \(--wbc-windows\) must be whole numbers >= 1"):
            WbcSettings(bad)
    with pytest.raises(ValueError):
        window_sizes("5,x")
    (option,) = [o for o in setting_options() if o.flag.name == "wbc-windows"]
    assert option.methods == ("wbc",)


# ---- the token-span readout ----


def test_token_spans_cover_each_scored_token_of_the_plain_pass(tiny_model_dir):
    tokenizer = load_model(str(tiny_model_dir), device="cpu", dtype="fp32").tokenizer
    for prepend_start in (True, False):
        ids = tokenize(tokenizer, TEXTS, prepend_start)
        found = token_spans(tokenizer, TEXTS, prepend_start)
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
        token_spans(object(), TEXTS, False)


def test_engines_that_cannot_give_spans_say_so_in_one_line():
    assert "give --tokenizer NAME" in served_refusal(TOKEN_SPANS, has_tokenizer=False)
    assert served_refusal(TOKEN_SPANS, has_tokenizer=True) is None
    line = CacheOnlyEngine.refusal(None, TOKEN_SPANS)
    assert "token statistics do not hold" in line and "\n" not in line


# ---- end to end on tiny models ----


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
