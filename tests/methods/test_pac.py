"""PAC: EDA's word swaps, the polarized distance on hand-built stats, and hand computations on a tiny model."""

import numpy as np
import pytest
import torch
from helpers import count_sequences, stats_of

from mia_fast import Detector
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.pac import PacSettings, SwappedWords, pac_passes, polarized_distance
from mia_fast.scoring.method_runs import score

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be that is the question",
    "hello world again and again",
]


def test_word_swaps_follow_eda():
    text = "a b c d e f g h i j"
    copies = [SwappedWords(copy)(text) for copy in range(5)]
    assert all(sorted(c.split(" ")) == sorted(text.split(" ")) for c in copies)  # a permutation of the words
    assert len(set(copies)) > 1 and SwappedWords(0)(text) == copies[0]  # seeded per copy and text
    assert SwappedWords(0, seed=1)(text) != copies[0] or SwappedWords(1, seed=1)(text) != copies[1]
    assert SwappedWords(0)("alone") == "alone"  # one word: nothing to swap


def test_polarized_distance_and_pac_on_hand_built_stats():
    # 20 tokens: top 5% = 1 token, bottom 30% = 6 tokens.
    logp = -np.arange(20, dtype=np.float32)
    expected = 0.0 - np.mean(-np.arange(14, 20))
    assert polarized_distance(stats_of(list(logp)))[0] == pytest.approx(expected)
    assert polarized_distance(stats_of([-2.0]))[0] == 0.0  # one token: max(1, ·) on both sides
    settings = MethodSettings(PacSettings(copies=2))
    first, second = pac_passes(settings)
    plain = stats_of([-1.0, -3.0], [])
    passes = {first: stats_of([-1.0, -5.0], []), second: stats_of([-2.0, -2.0], [])}
    got = score(ScoringInputs(stats=plain, passes=passes, settings=settings), resolve_methods(["pac"]))["pac"]
    assert got[0] == pytest.approx(((-1.0 + 5.0) + 0.0) / 2 - (-1.0 + 3.0))
    assert np.isnan(got[1])


def test_pac_equals_hand_computed_log_probs_and_runs_each_copy_once(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), [PacSettings(copies=3)])
    model, engine = detector.target.loaded.model, detector.target
    sequences = count_sequences(engine)
    texts = [*TEXTS, "alone"]
    got = detector.score(texts, methods=["pac", "loss"])["pac"]
    # One forward per distinct text among the texts and their copies: the one-word text's copies are
    # itself, and a swap of two equal words ("again") can give back a text already run.
    distinct = {*texts, *(SwappedWords(copy)(t) for t in texts for copy in range(3))}
    assert sequences[0] == len(distinct) and len(distinct) >= 4 + 3 * 3 - 2

    def pd(text: str) -> float:
        ids = engine.tokenize([text])[0]
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        values = np.sort([logp[t - 1, ids[t]].item() for t in range(1, len(ids))])
        high, low = max(int(len(values) * 0.05), 1), max(int(len(values) * 0.3), 1)
        return values[::-1][:high].mean() - values[:low].mean()

    for i, text in enumerate(TEXTS):
        expected = np.mean([pd(SwappedWords(copy)(text)) for copy in range(3)]) - pd(text)
        assert got[i] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert got[3] == pytest.approx(0.0, abs=1e-6)


def test_a_copy_count_out_of_range_is_refused_before_any_model_is_loaded():
    with pytest.raises(
        MiaFastError, match=r"PacSettings.copies \(--pac-copies\) must be a whole number in \[1, 1000\]"
    ):
        PacSettings(copies=-1)
