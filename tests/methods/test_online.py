"""Online detection (Min-K%++ §4.4): a token-level score on every window of a text, from its one forward pass."""

import json
import random

import numpy as np
import pytest
from conftest import random_sentence
from helpers import fail, fail_writes, read_jsonl, run_cli

from mia_fast import Detector, TokenStats, load_model, resolve_methods, score_stats
from mia_fast.errors import MiaFastError
from mia_fast.generation.finetune import FineTuning, fine_tune
from mia_fast.methods import online
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.online import OnlineSetting, online_scores, window_starts


def hand_built_stats(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return TokenStats.from_texts(
        [
            {
                "target_ids": rng.integers(0, 40, n),
                "logp": -rng.gamma(1.0, 2.0, n),
                "mu": -rng.gamma(1.0, 1.5, n),
                "var": rng.gamma(1.0, 1.0, n),
            }
            for n in lengths
        ]
    )


def plain_score(stats: TokenStats, column: str) -> np.ndarray:
    return score_stats(ScoringInputs(stats=stats), resolve_methods([column]))[column]


@pytest.mark.parametrize("column", ["loss", "mink_0.2", "minkpp_0.5"])
@pytest.mark.parametrize(("window", "stride"), [(5, 1), (5, 3), (4, None), (7, 7), (16, 2)])
def test_each_window_scores_as_the_method_on_its_slice(column, window, stride):
    lengths = [13, 0, 3, 1, 7, 20]
    stats = hand_built_stats(lengths)
    setting = OnlineSetting(window, stride, column)
    result = online_scores(stats, setting)
    assert len(result) == len(lengths)
    for i, (n, windows) in enumerate(zip(lengths, result)):
        np.testing.assert_array_equal(windows.starts, window_starts(n, window, setting.stride))
        np.testing.assert_array_equal(windows.ends - windows.starts, [min(window, n)] * len(windows.starts))
        covered = np.zeros(n, dtype=bool)
        for start, end in zip(windows.starts, windows.ends):
            covered[start:end] = True
        assert covered.all()
        sliced = TokenStats.from_texts(
            [{name: v[s:e] for name, v in stats.text(i).items()} for s, e in zip(windows.starts, windows.ends)]
        )
        expected = plain_score(sliced, column) if len(windows.starts) else np.zeros(0)
        np.testing.assert_allclose(windows.scores, expected, rtol=1e-12)
        if n:
            assert windows.max_score == windows.scores[windows.best] == windows.scores.max()
    assert result[1].best == -1 and result[1].best_span == (-1, -1) and np.isnan(result[1].max_score)


def test_windows_scored_a_chunk_at_a_time_score_the_same(monkeypatch):
    stats, setting = hand_built_stats([13, 0, 3, 40]), OnlineSetting(5, 2, "minkpp_0.5")
    whole = online_scores(stats, setting)
    monkeypatch.setattr(online, "_VALUES_PER_CHUNK", 12)  # two windows per chunk
    for one, chunked in zip(whole, online_scores(stats, setting)):
        np.testing.assert_array_equal(one.scores, chunked.scores)


def test_window_starts_cover_the_end_and_default_stride_is_half_the_window():
    assert window_starts(13, 5, 3).tolist() == [
        0,
        3,
        6,
        8,
    ]  # the stride does not land on the end: one last window ends there
    assert window_starts(10, 4, 2).tolist() == [0, 2, 4, 6]
    assert window_starts(3, 5, 2).tolist() == [0]  # shorter than the window: one window of the whole text
    assert window_starts(0, 5, 2).tolist() == []
    assert OnlineSetting(9).stride == 4 and OnlineSetting(1).stride == 1
    assert OnlineSetting(8, method="minkpp_0.20").method == "minkpp_0.2"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"window": 0}, "window must be a positive whole number"),
        ({"window": 2.5}, "window must be a positive whole number"),
        ({"window": 8, "stride": 0}, "stride must be a positive whole number"),
        ({"window": 8, "method": "zlib"}, "one token-level column"),
        ({"window": 8, "method": "mink"}, "one token-level column"),
        ({"window": 8, "method": "minkpp_1.5"}, "k must be a fraction"),
        ({"window": 8, "method": "nope"}, "unknown method"),
    ],
)
def test_bad_settings_are_refused(arguments, message):
    with pytest.raises(MiaFastError, match=message):
        OnlineSetting(**arguments)


def test_a_text_of_one_window_scores_as_detector_score(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    texts = ["the quick brown fox jumps over", "all that glitters is not gold", ""]
    n_tokens = detector.target.scored_positions(texts)
    plain = detector.score(texts, methods=["loss", "mink", "minkpp"], k=[0.2, 0.5])
    for column in ["loss", "mink_0.2", "minkpp_0.5"]:
        for window in (int(n_tokens.max()), int(n_tokens.max()) + 10):
            online = detector.score_online(texts, window=window, method=column)
            np.testing.assert_allclose(online.max_score, plain[column], rtol=1e-6)
    assert online.span_start.tolist() == [0, 0, -1] and online.span_end.tolist() == [*n_tokens[:2], -1]
    assert online.span_text == [*texts[:2], None]


def test_span_text_is_the_scored_tokens_of_the_best_window_in_a_text_longer_than_the_context(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))  # context 64: the forward itself runs in overlapping windows
    text = random_sentence(random.Random(3), 80)
    stats = detector.token_stats([text])
    assert stats.lengths[0] > 2 * detector.target.max_length
    online = detector.score_online([text], window=12, stride=5, method="mink_0.2")
    start, end = online.span_start[0], online.span_end[0]
    assert end - start == 12
    assert online.span_text[0] == detector.target.loaded.tokenizer.decode(stats.target_ids[start:end])
    np.testing.assert_allclose(online.windows[0].scores, online_scores(stats, online.setting)[0].scores)


def test_the_best_window_finds_a_member_paragraph_planted_in_non_member_text(tiny_model_dir):
    """The issue's must-show: a paragraph the model was fine-tuned on until memorised, inside fresh text of the
    same words; the text's best window overlaps the paragraph's tokens."""
    rng = random.Random(1)
    member = random_sentence(rng, 14)
    text = f"{random_sentence(rng, 20)} {member} {random_sentence(rng, 20)}"
    loaded = load_model(str(tiny_model_dir))
    losses = fine_tune(loaded, [member], FineTuning(epochs=40, learning_rate=3e-3, batch_size=1, max_tokens=None))
    assert losses[-1] < 0.05, "the paragraph must be memorised"
    detector = Detector(loaded)

    encoded = loaded.tokenizer(text, return_offsets_mapping=True)
    start_tokens = len(detector.target.tokenize([text])[0]) - len(encoded["input_ids"])
    begin, end = text.index(member), text.index(member) + len(member)
    member_tokens = [
        i + start_tokens - 1 for i, (a, b) in enumerate(encoded["offset_mapping"]) if a < end and b > begin
    ]
    for column in ["minkpp_0.2", "mink_0.2", "loss"]:
        online = detector.score_online([text], window=16, method=column)
        span = range(online.span_start[0], online.span_end[0])
        assert set(span) & set(member_tokens), (column, span, member_tokens)
        assert online.span_text[0] in text


@pytest.fixture()
def long_data(tmp_path):
    rng = random.Random(0)
    rows = [{"id": f"d{i}", "text": random_sentence(rng, words)} for i, words in enumerate([40, 3, 0, 12, 30])]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_writes_the_best_window_and_every_window(tiny_model_dir, long_data, tmp_path):
    out = tmp_path / "x.jsonl"
    assert (
        run_cli(
            "score",
            long_data,
            "--model",
            tiny_model_dir,
            "--online",
            8,
            "--out",
            out,
            "--methods",
            "loss",
            "--quiet",
            "--block-rows",
            2,
        )
        == 0
    )
    rows, windows = read_jsonl(out), read_jsonl(tmp_path / "x.windows.jsonl")
    assert list(rows[0]) == [
        "id",
        "n_tokens",
        "loss",
        "online_max",
        "online_start",
        "online_end",
        "online_text",
        "warning",
    ]
    assert [w["row"] for w in windows] == list(range(5)) and [w["id"] for w in windows] == [r["id"] for r in rows]
    assert {(w["method"], w["window"], w["stride"]) for w in windows} == {("minkpp_0.2", 8, 4)}
    for row, w in zip(rows, windows):
        if row["n_tokens"] == 0:
            assert w["starts"] == [] and row["online_max"] is row["online_start"] is row["online_text"] is None
            continue
        best = int(np.argmax(w["scores"]))
        assert row["online_max"] == w["scores"][best]
        assert (row["online_start"], row["online_end"]) == (w["starts"][best], w["ends"][best])
        assert row["online_end"] - row["online_start"] == min(8, row["n_tokens"])
    detector = Detector(str(tiny_model_dir))
    texts = [json.loads(line)["text"] for line in long_data.read_text().splitlines()]
    online = detector.score_online(texts, window=8)
    assert [r["online_text"] for r in rows] == online.span_text
    np.testing.assert_allclose(
        [w["scores"][0] for w in windows if w["scores"]],
        [w.scores[0] for w in online.windows if len(w.scores)],
        rtol=1e-6,
    )


def test_cli_refuses_bad_online_options_before_loading_a_model_and_keeps_what_was_written(long_data, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    out.write_text("kept\n")
    nowhere = tmp_path / "no-such-model"
    for options, message in [
        (["--online", 0], "argument --online: must be a whole number in [1, 1048576], got '0'"),
        (["--online", 8, "--online-stride", -1], "argument --online-stride: must be a whole number in [1, 1048576]"),
        (["--online", 8, "--online-method", "zlib"], "one token-level column"),
        (["--online-stride", 3], "--online-stride need --online W"),
    ]:
        assert run_cli("score", long_data, "--model", nowhere, "--out", out, "--overwrite", "--quiet", *options) == 2
        assert message in capsys.readouterr().err
    assert out.read_text() == "kept\n"


def test_cli_resume_keeps_the_windows_file_in_step(tiny_model_dir, long_data, tmp_path, capsys, monkeypatch):
    base = [
        "score",
        long_data,
        "--model",
        tiny_model_dir,
        "--methods",
        "loss",
        "--quiet",
        "--online",
        6,
        "--online-stride",
        4,
        "--block-rows",
        2,
    ]
    full = tmp_path / "full.jsonl"
    assert run_cli(*base, "--out", full) == 0
    out, side = tmp_path / "cut.jsonl", tmp_path / "cut.windows.jsonl"
    with monkeypatch.context() as patched:
        fail_writes(patched, from_block=3)  # the windows of rows 3-4 are written, their scores are not
        assert "the 2 rows finished are kept" in fail(capsys, *base, "--out", out)
    assert "interrupted run; pass --resume" in fail(capsys, *base, "--out", out, "--online", 8)
    assert "online: " in fail(capsys, *base[:-6], "--online", 8, "--out", out, "--resume")
    assert run_cli(*base, "--out", out, "--resume") == 0
    assert out.read_bytes() == full.read_bytes()
    assert [r["online_start"] for r in read_jsonl(out)] == [r["online_start"] for r in read_jsonl(full)]
    resumed_windows = read_jsonl(side)
    assert [w["row"] for w in resumed_windows] == list(range(5))
    for resumed, uninterrupted in zip(resumed_windows, read_jsonl(tmp_path / "full.windows.jsonl")):
        assert resumed["starts"] == uninterrupted["starts"]
        np.testing.assert_allclose(resumed["scores"], uninterrupted["scores"], rtol=1e-6)
