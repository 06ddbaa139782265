"""The n-gram coverage attack: the public code's sweep, coverage and creativity index on hand-built words, the
prompt and suffix cut, scores from hand-built samples, its sampling pass on a tiny model (top-p, a fixed length,
no dependence on the batch) and a served model that is not refused."""

import socket

import numpy as np
import pytest
from helpers import record_generations, refused, write_jsonl

from mia_fast import ComputeConfig, Detector, NgramCoverageSettings
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.ngram_coverage import Prompt, coverage, creativity, matched_spans, ngram_pass, word_tools
from mia_fast.scoring.method_runs import score
from mia_fast.scoring.planner import run_passes
from mia_fast.served.model import served_refusal


def spaced(words: list[str]) -> str:
    return " ".join(words)


def test_the_sweep_grows_a_match_and_keeps_the_longest_window():
    words = "the cat sat on the mat".split()
    # "the cat sat" misses; from "cat sat on" the window grows to the end.
    assert matched_spans(words, "a cat sat on the mat today", 3, spaced) == [(1, 6)]
    assert coverage([(1, 6)], len(words)) == pytest.approx(5 / 6)


def test_a_window_that_stops_matching_drops_its_first_word_and_later_spans_are_added():
    words = "x a b c y d e f g h".split()
    spans = matched_spans(words, "a b c z d e f g h", 3, spaced)
    assert spans == [(1, 4), (5, 10)]
    assert coverage(spans, len(words)) == pytest.approx(8 / 10)
    # Spans of 3 and 5 words: 0.8 for m = 2 and 3, 0.5 for m = 4 and 5, nothing from 6 to 12.
    assert creativity(spans, len(words)) == pytest.approx(0.8 * 2 + 0.5 * 2)


def test_overlapping_spans_cover_their_union():
    words = "a b c d e f".split()
    spans = matched_spans(words, "a b c d x c d e f", 3, spaced)
    assert spans == [(0, 4), (2, 6)]
    assert coverage(spans, len(words)) == 1.0
    assert creativity(spans, len(words)) == pytest.approx(3.0)  # both spans have 4 words: m = 2, 3, 4


def test_a_match_is_a_substring_of_the_suffix_and_short_samples_cover_nothing():
    # As in the public code, the detokenized span only has to occur in the suffix's text, even inside a word.
    assert matched_spans("he said that".split(), "she said that", 3, spaced) == [(0, 3)]
    assert matched_spans("a b".split(), "a b", 3, spaced) == []
    assert coverage([], 0) == 0.0 and coverage([], 5) == 0.0 and creativity([], 5) == 0.0
    assert coverage([(0, 3)], 6, least=4) == 0.0


def test_the_public_word_tools_detokenize_before_matching():
    pytest.importorskip("nltk")
    tokenize, detokenize, to_ascii = word_tools()
    words = tokenize(to_ascii("The cat , sat on the “mat” ."))
    assert words == ["The", "cat", ",", "sat", "on", "the", '"', "mat", '"', "."]
    # Words joined by Moses' rules ("cat," not "cat ,") occur in the suffix as written; joined by spaces they do not.
    reference = to_ascii("The cat, sat on the “mat”.")
    assert coverage(matched_spans(words, reference, 3, detokenize), len(words)) == 1.0
    assert matched_spans(words, reference, 3, spaced) == [(2, 7)]  # only ", sat on the \""


def test_the_prompt_is_the_text_before_its_last_words():
    assert Prompt(0.5)("one two  three\nfour five") == "one two  three"  # int(5 · 0.5) = 2 words compared
    assert Prompt(0.3)("a b c d e f g h i j") == "a b c d e f g"
    assert Prompt(1.0)("a b c") == "a"  # at least one word of prompt
    assert Prompt(0.01)("a b c") == "a b"  # at least one word compared
    assert Prompt(0.5)("single") == "" and Prompt(0.5)("") == ""


def test_scores_are_the_best_sample_of_each_text():
    pytest.importorskip("nltk")
    settings = MethodSettings(NgramCoverageSettings(samples=3))
    texts = ["one two three four five six seven eight", "", "alone"]
    samples = np.array(
        [["five six seven nine", "five six seven eight ten", ""], ["", "", ""], ["", "", ""]], dtype=object
    )
    inputs = ScoringInputs(stats=None, passes={ngram_pass(settings): samples}, texts=texts, settings=settings)
    got = score(inputs, resolve_methods(["ngram_coverage", "ngram_creativity"]))
    # Suffix "five six seven eight": the first sample covers 3 of its 4 words, the second 4 of its 5.
    assert got["ngram_coverage"][0] == pytest.approx(0.8)
    assert got["ngram_creativity"][0] == pytest.approx(3 * 0.8)  # its one span of 4 words: m = 2, 3, 4
    assert np.isnan(got["ngram_coverage"][1:]).all() and np.isnan(got["ngram_creativity"][1:]).all()


def test_texts_too_short_to_compare_n_words_are_refused_naming_the_text():
    pytest.importorskip("nltk")
    settings = NgramCoverageSettings()
    settings.check_texts(["one two three four five six", "", "  "])  # 3 words compared; empty texts are NaN later
    with pytest.raises(MiaFastError) as caught:
        settings.check_texts(["one two three four five six", "one two three four five"])
    assert str(caught.value) == (
        "text 2 ('one two three four five') is too short for the n-gram coverage attack: of its 5 word(s), "
        "2 would follow a prompt (--ngram-suffix 0.5), fewer than --ngram-n 3"
    )
    NgramCoverageSettings(n=2).check_texts(["one two three four five"])
    with pytest.raises(MiaFastError, match="text 1 \\('alone'\\).* of its 1 word\\(s\\), 0 would follow a prompt"):
        NgramCoverageSettings(n=1).check_texts(["alone"])


def test_its_pass_samples_by_top_p_for_a_fixed_length_whatever_the_batch(tiny_model_dir, monkeypatch):
    calls = record_generations(monkeypatch)
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be that is the question"]
    samples = {}
    for budget in (8, 100_000):
        detector = Detector(
            str(tiny_model_dir),
            [NgramCoverageSettings(samples=3, new_tokens=5)],
            compute=ComputeConfig(batch_tokens=budget),
        )
        samples[budget] = run_passes(detector.engines, texts, [ngram_pass(detector.settings)])[
            ngram_pass(detector.settings)
        ]
    np.testing.assert_array_equal(samples[8], samples[100_000])
    assert samples[8].shape == (2, 3) and any(s for s in samples[8].ravel())
    top_k, top_p = calls[0][3], calls[0][-1]
    assert (top_k, top_p) == (0, 0.95) and all(n == 5 for _, _, new_tokens, *_ in calls for n in new_tokens)


def test_a_served_model_is_not_refused_the_attack(tmp_path, capsys):
    assert served_refusal(ngram_pass(MethodSettings()).readout, has_tokenizer=False) is None
    data = write_jsonl(tmp_path / "in.jsonl", [{"text": "one two three four five six seven eight"}])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    line = refused(
        capsys,
        "score",
        data,
        "--server",
        f"http://127.0.0.1:{port}",
        "--server-model",
        "m",
        "--methods",
        "ngram_coverage,ngram_creativity",
        "--out",
        tmp_path / "o.jsonl",
        keep=[tmp_path],
    )
    assert "refuses connections" in line, line  # it got as far as asking the server
