"""Token ids as every method scores them (tokens.tokenize): the start-token rule, sliding windows, the rows an
engine runs (each text after its prefix), and each text's results put back together."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import train_tokenizer
from hypothesis import given
from hypothesis import strategies as st

from mia_fast import load_model
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.tokens.tokenize import (
    Row,
    TextRows,
    Window,
    check_deterministic,
    encodable,
    per_text,
    split_windows,
    start_token_id,
    token_spans,
    tokenize,
)

pytestmark = pytest.mark.lower_bounds


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir))


def test_bos_is_prepended_once(loaded):
    tok = loaded.tokenizer
    bos = tok.bos_token_id
    plain = tokenize(tok, ["the fox"], prepend_start=False)[0]
    assert plain[0] != bos
    assert tokenize(tok, ["the fox"], prepend_start=True)[0] == [bos, *plain]
    # already there (the tokenizer or the text added it): not added twice
    assert tokenize(tok, ["<s>the fox"], prepend_start=True)[0].count(bos) == 1


def test_eos_is_the_start_token_without_bos(tiny_eos_only_model_dir):
    tok = load_model(str(tiny_eos_only_model_dir)).tokenizer
    assert tok.bos_token_id is None
    assert start_token_id(tok) == tok.eos_token_id
    assert tokenize(tok, ["the fox"], prepend_start=True)[0][0] == tok.eos_token_id


def test_a_tokenizer_without_bos_or_eos_has_no_start_token():
    with pytest.raises(MiaFastError, match="neither a BOS nor an EOS token .*; use prepend_start=False"):
        start_token_id(SimpleNamespace(bos_token_id=None, eos_token_id=None))


def test_no_texts_tokenize_to_nothing(loaded):
    assert tokenize(loaded.tokenizer, [], prepend_start=True) == []


def test_a_lone_surrogate_is_encoded_as_the_replacement_character_with_a_warning():
    with pytest.warns(MiaFastWarning, match=re.escape("the text 'a\ufffdb' had 1 lone surrogate(s)")):
        assert encodable(["a\ud800b", "fine"]) == ["a\ufffdb", "fine"]


def test_token_spans_cover_the_scored_tokens_in_order(loaded):
    texts = ["the quick brown fox", "a"]
    spans = token_spans(loaded.tokenizer, texts, prepend_start=True)
    ids = tokenize(loaded.tokenizer, texts, prepend_start=True)
    for text, text_ids, text_spans in zip(texts, ids, spans):
        assert text_spans.shape == (len(text_ids) - 1, 2)
        assert (np.diff(text_spans[:, 0]) > 0).all() and text_spans[-1, 1] == len(text)
    assert len(token_spans(loaded.tokenizer, [], prepend_start=True)) == 0


def test_a_slow_tokenizer_gives_no_spans():
    with pytest.raises(MiaFastError, match="SimpleNamespace is not a fast tokenizer"):
        token_spans(SimpleNamespace(is_fast=False), ["a"], prepend_start=True)


@given(st.integers(0, 500), st.integers(2, 64))
def test_windows_score_every_target_exactly_once(n_ids, max_length):
    windows = split_windows(0, n_ids, max_length)
    scored = [t for w in windows for t in range(w.first_target, w.end)]
    assert scored == list(range(1, n_ids)) if n_ids >= 2 else scored == []
    for w in windows:
        assert w.length <= max_length
        # every target after the first window keeps at least half a window of context
        assert w.first_target - w.begin >= (1 if w.begin == 0 else max_length // 2)


def test_windows_step_by_half_a_window():
    assert split_windows(3, 10, 4) == [Window(3, 0, 4, 1), Window(3, 2, 6, 4), Window(3, 4, 8, 6), Window(3, 6, 10, 8)]
    assert split_windows(0, 4, 8) == [Window(0, 0, 4, 1)]
    assert split_windows(0, 1, 8) == []
    with pytest.raises(MiaFastError, match="max_length must be at least 2, got 1"):
        split_windows(0, 5, 1)


class Characters(TextRows):
    """Texts as the code points of their characters, recording each encoding asked for."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length
        self.encoded: list[tuple[list[str], bool]] = []

    def _encode(self, texts: Sequence[str], *, ahead: bool) -> list[list[int]]:
        self.encoded.append((list(texts), ahead))
        return [[ord(c) for c in text] for text in texts]


def codes(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_rows_put_the_prefix_before_each_window_unscored():
    rows = Characters(max_length=8).rows(["abcdefghij", "xy", ""], ["PQ", "PQ", "PQ"])
    context = codes("PQ")
    # 6 ids of text per window after the 2 of the prefix: windows [0, 6), [3, 9), [6, 10)
    assert rows == [
        Row(0, context + codes("abcdef"), 3, 2),
        Row(0, context + codes("defghi"), 5, 2),
        Row(0, context + codes("ghij"), 5, 2),
        Row(1, context + codes("xy"), 3, 2),
    ]


def test_rows_without_prefixes_are_the_texts_windows():
    assert Characters(max_length=8).rows(["abc", "d"], None) == [Row(0, codes("abc"), 1, 0)]


def test_a_prefix_over_half_the_window_is_refused():
    with pytest.raises(MiaFastError, match="the prefix is 5 tokens, more than half of the 8-token window"):
        Characters(max_length=8).rows(["abc"], ["PQRST"])


def test_scored_positions_are_every_id_after_the_first():
    assert Characters(max_length=8).scored_positions(["abc", "", "a"]).tolist() == [2, 0, 0]


def test_texts_tokenized_ahead_are_not_encoded_again():
    engine = Characters(max_length=8)
    engine.tokenize_ahead(["ab", "cd"])
    assert engine.tokenize(["cd", "ef"]) == [codes("cd"), codes("ef")]
    assert engine.encoded == [(["ab", "cd"], True), (["ef"], False)]
    engine.tokenize_ahead(["gh"])  # the latest two blocks are kept
    engine.tokenize_ahead(["ij"])
    engine.tokenize(["ab", "gh", "ij"])
    assert engine.encoded[-1] == (["ab"], False)


def result(ids: list[int], logp: list[float]) -> dict[str, np.ndarray]:
    return {
        "target_ids": np.array(ids, np.int64),
        "logp": np.array(logp, np.float32),
        "mu": np.zeros(len(ids), np.float32),
        "var": np.ones(len(ids), np.float32),
    }


def test_each_texts_windows_are_put_end_to_end_and_a_text_without_rows_is_empty():
    rows = [Row(0, [1, 2, 3], 1), Row(2, [7, 8], 1), Row(0, [2, 3, 4], 2)]
    texts = per_text(rows, [result([2, 3], [-1, -2]), result([8], [-5]), result([4], [-3])], texts=3)
    assert texts[0]["target_ids"].tolist() == [2, 3, 4] and texts[0]["logp"].tolist() == [-1, -2, -3]
    assert texts[2]["target_ids"].tolist() == [8]
    assert set(texts[1]) == {"target_ids", "logp", "mu", "var"} and len(texts[1]["logp"]) == 0


def test_a_text_without_rows_holds_empty_top_logprobs_where_the_results_carry_them():
    empty = per_text([], [], texts=1, top=3)[0]
    assert set(empty) == {"target_ids", "logp", "top", "target_in_top"} and empty["top"].shape == (0, 3)


def test_a_tokenizer_with_bpe_dropout_is_refused_naming_the_setting():
    tokenizer = train_tokenizer({"bos_token": "<s>", "eos_token": "</s>"})
    assert check_deterministic(tokenizer, "m") is tokenizer
    tokenizer.backend_tokenizer.model.dropout = 0.25
    with pytest.raises(MiaFastError, match=r"^m: model.dropout = 0.25 in its tokenizer.json makes tokenization random"):
        check_deterministic(tokenizer, "m")
    tokenizer.backend_tokenizer.model.dropout = 0.0  # no merge dropped: the same ids every call
    assert check_deterministic(tokenizer, "m") is tokenizer
