"""The flow every engine of a model shares (engines.base), on an engine made here over the tiny model's
tokenizer: a readout goes to the reader it names or is refused in one line, TokenStats pass through the stats
cache (a rerun computes nothing it holds), the provenance is the settings' recorded part, and a sampled
continuation's prompt is cut to the window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from mia_fast import load_model
from mia_fast.engines.base import ModelEngine
from mia_fast.engines.passes import (
    TOKEN_SPANS,
    TOKEN_STATS,
    GradientNormReadout,
    HiddenStatesReadout,
    Progress,
    Readout,
    SamplesReadout,
)
from mia_fast.engines.stats import TokenStats
from mia_fast.errors import MiaFastError
from mia_fast.tokens.tokenize import token_spans

TEXTS = ["the quick brown fox", "all that glitters", "to be or not to be"]


class Recording(ModelEngine):
    """An engine whose token i of a text gets log-prob -i, recording the texts it computes and the readers run."""

    def __init__(self, loaded: Any, max_length: int = 16, name: str = "w1") -> None:
        self.loaded, self.prepend_start, self.max_length, self.name = loaded, True, max_length, name
        self.computed: list[list[str]] = []
        self.read: list[tuple] = []

    def cache_settings(self) -> dict[str, Any]:
        return {"weights": self.name, "tokenizer": "t1", "dtype": "fp32", "kernel": "recorded"}

    def model_name(self) -> str:
        return f"recording {self.name}"

    def _missing_stats(self, texts: Sequence[str], prefixes: Sequence[str], progress: Progress) -> TokenStats:
        self.computed.append(list(texts))
        return TokenStats.from_texts(
            [
                {
                    "target_ids": ids[1:],
                    "logp": -np.arange(1, len(ids), dtype=np.float32),
                    "mu": np.zeros(len(ids) - 1),
                    "var": np.ones(len(ids) - 1),
                }
                for ids in self.tokenize(texts)
            ]
        )

    def refusal(self, readout: Readout) -> str | None:
        return "the model's gradients" if isinstance(readout, GradientNormReadout) else None

    def hidden_states(self, texts: Sequence[str], readout: Readout, prefixes: Any, progress: Progress) -> np.ndarray:
        self.read.append((list(texts), readout, prefixes))
        return np.array([[len(text)] for text in texts], np.float32)


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir))


def test_token_stats_are_computed_for_their_readout(loaded):
    engine = Recording(loaded)
    stats = engine.run(TOKEN_STATS, TEXTS)
    assert stats.lengths.tolist() == [len(ids) - 1 for ids in engine.tokenize(TEXTS)]
    assert stats.logp[:2].tolist() == [-1.0, -2.0] and engine.computed == [TEXTS]


def test_a_readout_goes_to_the_reader_it_names(loaded):
    engine = Recording(loaded)
    readout = HiddenStatesReadout(layers=(1,))
    assert engine.run(readout, ["ab", "abc"], ["p", "q"]).tolist() == [[2.0], [3.0]]
    assert engine.read == [(["ab", "abc"], readout, ["p", "q"])] and engine.computed == []


def test_token_spans_come_from_the_tokenizer_here(loaded):
    spans = Recording(loaded).run(TOKEN_SPANS, TEXTS)
    for got, expected in zip(spans, token_spans(loaded.tokenizer, TEXTS, prepend_start=True)):
        np.testing.assert_array_equal(got, expected)


def test_a_refused_readout_is_one_line_and_runs_nothing(loaded):
    engine = Recording(loaded)
    with pytest.raises(MiaFastError, match="^a method here needs the model's gradients$"):
        engine.run(GradientNormReadout(), TEXTS)
    assert engine.computed == [] and engine.read == []


def test_with_a_stats_cache_only_the_texts_it_lacks_are_computed(loaded, tmp_path):
    engine = Recording(loaded)
    engine.use_cache(tmp_path / "cache", log=print)
    first = engine.compute(TEXTS[:2])
    again = engine.compute([TEXTS[1], TEXTS[2]])
    assert engine.computed == [TEXTS[:2], [TEXTS[2]]]
    np.testing.assert_array_equal(again.take([0]).logp, first.take([1]).logp)
    engine.compute(TEXTS)
    engine.compute(TEXTS[:1], prefixes=["the rain "])  # another prefix is another pass
    assert engine.computed == [TEXTS[:2], [TEXTS[2]], [TEXTS[0]]]


def test_a_rerun_over_the_same_cache_computes_nothing(loaded, tmp_path):
    Recording(loaded).use_cache(tmp_path, log=print)
    first = Recording(loaded)
    first.use_cache(tmp_path, log=print)
    expected = first.compute(TEXTS)
    rerun = Recording(loaded)
    rerun.use_cache(tmp_path, log=print)
    np.testing.assert_array_equal(rerun.compute(TEXTS).logp, expected.logp)
    assert rerun.computed == []


def test_a_cache_of_other_settings_is_said_once_and_added_to(loaded, tmp_path):
    other = Recording(loaded, name="w0")
    other.use_cache(tmp_path, log=print)
    other.compute(TEXTS[:1])
    notes = []
    engine = Recording(loaded)
    engine.use_cache(tmp_path, log=notes.append)
    assert notes == [
        f"stats cache {tmp_path}: it holds the stats of 1 other model setting(s), none of this one (recording w1); "
        "texts are computed and added"
    ]
    engine.compute(TEXTS[:1])
    assert engine.computed == [TEXTS[:1]]


def test_a_cache_of_more_settings_is_another_cache_and_none_without_a_folder(loaded, tmp_path):
    engine = Recording(loaded)
    assert engine.cache is None and engine.stats_cache({"top": 5}) is None
    engine.use_cache(tmp_path, log=print)
    more = engine.stats_cache({"top": 5})
    assert more.settings["top"] == 5 and more.setting_id != engine.cache.setting_id
    assert engine.stats_cache().setting_id == engine.cache.setting_id


def test_the_provenance_is_the_recorded_part_of_the_cache_settings(loaded):
    assert Recording(loaded).provenance() == {"weights": "w1", "tokenizer": "t1", "dtype": "fp32"}


def test_texts_tokenized_ahead_use_a_tokenizer_of_their_own_and_give_the_same_ids(loaded):
    engine = Recording(loaded)
    expected = engine.tokenize(TEXTS)
    engine.tokenize_ahead(TEXTS)
    assert engine._ahead_tokenizer is not None and engine._ahead_tokenizer is not loaded.tokenizer
    assert engine.tokenize(TEXTS) == expected


def test_a_prompt_is_cut_to_leave_room_for_its_continuation_and_an_empty_text_is_skipped(loaded):
    engine = Recording(loaded, max_length=16)
    long_text = "the quick brown fox jumps over the lazy dog and the rain in spain stays mainly in the plain"
    texts = [long_text, "", "all that"]
    ids = engine.tokenize(texts)
    assert len(ids[0]) > 16
    # As many new tokens as the text has, at most half the window; the prompt keeps its last ids.
    prompts = engine.sample_prompts(texts, SamplesReadout(count=2), None)
    assert prompts == [(0, ids[0][-8:], 8), (2, ids[2], len(ids[2]) - 1)]
    prompts = engine.sample_prompts(texts, SamplesReadout(count=2, new_tokens=3), ["p", "", "p"])
    context = engine.context_ids("p")
    assert prompts == [(0, (context + ids[0])[-13:], 3), (2, context + ids[2], 3)]
