"""SaMIA, PAC and the gradient norm: formulas on hand-built inputs, hand computations on a tiny model,
sampling that does not depend on the batch, the passes they share, and the bad inputs."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import count_sequences, fail, read_jsonl, run_cli, stats_of, write_jsonl

from mia_fast import ComputeConfig, Detector
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, ScoringInputs, resolve_methods, score
from mia_fast.methods.gradnorm import GradnormSettings
from mia_fast.methods.pac import PacSettings, SwappedWords, pac_passes, polarized_distance
from mia_fast.methods.samia import FirstHalf, SamiaSettings, rouge1_recall, samia_pass, zlib_size
from mia_fast.pipeline.sampling import gumbel_noise
from mia_fast.scoring.planner import run_passes

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be that is the question",
    "hello world again and again",
]


# ---- SaMIA ----


def test_rouge1_recall_and_halves_by_hand():
    assert rouge1_recall("a b b c".split(), "b b b d".split()) == pytest.approx(2 / 4)  # b clipped at 2, d missed
    assert rouge1_recall([], ["a"]) == 0.0 and rouge1_recall(["a"], []) == 0.0
    assert FirstHalf()("one two  three\nfour five") == "one two"  # int(5/2) words, joined by single spaces
    assert FirstHalf()("single") == ""


def test_samia_scores_from_hand_built_samples():
    settings = MethodSettings(SamiaSettings(samples=2))
    texts = ["a b c d", "x y z w", "lonely"]
    samples = np.array([["c d", "c c e"], ["", "w w w w"], ["", ""]], dtype=object)
    inputs = ScoringInputs(stats=None, passes={samia_pass(settings): samples}, texts=texts, settings=settings)
    got = score(inputs, resolve_methods(["samia", "samia_zlib"]))
    # Second halves: "c d" and "z w". Recalls: (1 + 1/2) / 2 and (0 + 1/2) / 2; "lonely" has no halves.
    np.testing.assert_allclose(got["samia"][:2], [0.75, 0.25])
    assert np.isnan(got["samia"][2])
    assert got["samia_zlib"][0] == pytest.approx((1.0 * zlib_size(["c", "d"]) + 0.5 * zlib_size(["c", "c", "e"])) / 2)
    assert got["samia_zlib"][1] == pytest.approx(0.5 * zlib_size(["w"] * 4) / 2)


def test_keyed_gumbel_noise_is_gumbel_and_depends_on_key_and_step_only():
    keys = torch.tensor([[1, 2], [1, 2], [3, 4]])
    noise = gumbel_noise(keys, step=0, vocab=20000)
    assert torch.equal(noise[0], noise[1]) and not torch.equal(noise[0], noise[2])
    assert not torch.equal(noise[0], gumbel_noise(keys[:1], step=1, vocab=20000)[0])
    assert torch.equal(gumbel_noise(keys[2:], step=0, vocab=20000)[0], noise[2])  # alone or in a batch
    # Gumbel(0, 1): mean = Euler's constant, variance = π²/6.
    assert noise.mean().item() == pytest.approx(0.5772, abs=0.02)
    assert noise.var().item() == pytest.approx(np.pi**2 / 6, rel=0.05)


def test_gumbel_argmax_samples_from_the_top_k_softmax():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.2, 1e-9]))
    keys = torch.stack([torch.arange(4000), torch.arange(4000) * 7 + 1], dim=1)
    picks = (logits[None, :] + gumbel_noise(keys, 0, 4)).argmax(1)
    frequencies = torch.bincount(picks, minlength=4).float() / len(picks)
    np.testing.assert_allclose(frequencies.numpy(), [0.5, 0.3, 0.2, 0.0], atol=0.03)


def test_samples_do_not_depend_on_batch_size_or_on_the_other_texts(tiny_model_dir):
    methods = ["samia", "samia_zlib"]
    texts = [*TEXTS, "one two three four five six seven eight nine ten"]
    samples, scores = {}, {}
    for budget in (8, 100_000):
        detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=3)], compute=ComputeConfig(batch_tokens=budget))
        samples[budget] = run_passes(detector.engines, texts, [samia_pass(detector.settings)])[
            samia_pass(detector.settings)
        ]
        scores[budget] = detector.score(texts, methods=methods)
    np.testing.assert_array_equal(samples[8], samples[100_000])
    for method in methods:
        np.testing.assert_array_equal(scores[8][method], scores[100_000][method])
    alone = Detector(str(tiny_model_dir), [SamiaSettings(samples=3)])
    np.testing.assert_array_equal(
        run_passes(alone.engines, texts[1:2], [samia_pass(alone.settings)])[samia_pass(alone.settings)][0],
        samples[8][1],
    )
    other_seed = Detector(str(tiny_model_dir), [SamiaSettings(samples=3, seed=1)])
    assert not np.array_equal(
        run_passes(other_seed.engines, texts, [samia_pass(other_seed.settings)])[samia_pass(other_seed.settings)],
        samples[8],
    )


def test_samia_and_samia_zlib_share_one_generation_as_long_as_each_first_half(tiny_model_dir, monkeypatch):
    import mia_fast.pipeline.sampling as sampling

    calls = []
    original = sampling.generate
    monkeypatch.setattr(
        sampling,
        "generate",
        lambda model, prompts, keys, new_tokens, *rest: (
            calls.append((prompts, keys, new_tokens)) or original(model, prompts, keys, new_tokens, *rest)
        ),
    )
    detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=4)])
    detector.score(TEXTS, methods=["samia", "samia_zlib"])
    rows = [
        (prompt, len(prompt_keys), new)
        for prompts, keys, new_tokens in calls
        for prompt, prompt_keys, new in zip(prompts, keys, new_tokens)
    ]
    assert len(rows) == len(TEXTS) and all(samples == 4 for _, samples, _ in rows)  # each prompt once, 4 samples
    halves = {tuple(ids) for ids in detector.target.tokenize([FirstHalf()(t) for t in TEXTS])}
    assert {tuple(prompt) for prompt, _, _ in rows} == halves
    assert all(new == len(prompt) - 1 for prompt, _, new in rows)  # as many tokens as the prompt, bar its start token


# ---- PAC ----


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


# ---- gradient norm ----


def test_gradnorm_of_the_head_equals_its_closed_form(tiny_model_dir):
    """d mean-loss / d W_head = (1/T) Σ_t (softmax(W h_t) - onehot(y_t)) h_tᵀ, computed without autograd."""
    detector = Detector(str(tiny_model_dir), [GradnormSettings(norm=2, params=("lm_head.weight",))])
    model, engine = detector.target.loaded.model, detector.target
    got = detector.score(TEXTS, methods=["gradnorm"])["gradnorm"]
    for i, text in enumerate(TEXTS):
        ids = engine.tokenize([text])[0]
        with torch.inference_mode():
            hidden = model.base_model(torch.tensor([ids])).last_hidden_state[0, :-1].double()
        weight = model.lm_head.weight.detach().double()
        residual = torch.softmax(hidden @ weight.T, -1)
        residual[torch.arange(len(ids) - 1), torch.tensor(ids[1:])] -= 1
        gradient = residual.T @ hidden / (len(ids) - 1)
        assert got[i] == pytest.approx(-torch.linalg.norm(gradient).item(), rel=1e-4)


def test_gradnorm_over_all_parameters_matches_a_per_text_backward_and_leaves_the_model_as_it_was(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), compute=ComputeConfig(batch_tokens=16))
    model, engine = detector.target.loaded.model, detector.target
    flags = [p.requires_grad for p in model.parameters()]
    long_text = " ".join(["the lazy dog sleeps under the warm sun"] * 12)  # longer than the 64-token window
    got = detector.score([*TEXTS, long_text, ""], methods=["gradnorm"])["gradnorm"]
    assert [p.requires_grad for p in model.parameters()] == flags and all(p.grad is None for p in model.parameters())
    for i, text in enumerate(TEXTS):
        ids = torch.tensor([engine.tokenize([text])[0]])
        model.zero_grad()
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])
        (-logp.mean()).backward()
        expected = torch.stack([p.grad.abs().max() for p in model.parameters() if p.grad is not None]).mean().item()
        model.zero_grad(set_to_none=True)
        assert got[i] == pytest.approx(-expected, rel=1e-4)
    assert np.isfinite(got[3]) and np.isnan(got[4])


# ---- bad inputs ----


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: SamiaSettings(samples=0),
            r"SamiaSettings.samples \(--samia-samples\) must be a whole number in \[1, 1000\]",
        ),
        (lambda: PacSettings(copies=-1), r"PacSettings.copies \(--pac-copies\) must be a whole number in \[1, 1000\]"),
        (lambda: GradnormSettings(norm=3), "order must be 1, 2 or inf"),
    ],
)
def test_bad_settings_are_refused_before_any_model_is_loaded(make, message):
    with pytest.raises(MiaFastError, match=message):
        make()


def test_a_parameter_pattern_that_matches_nothing_is_refused(tiny_model_dir):
    with pytest.raises(MiaFastError, match="no parameter of .* matches model.nothing.*"):
        Detector(str(tiny_model_dir), [GradnormSettings(params=("model.nothing.*",))]).score(
            TEXTS, methods=["gradnorm"]
        )


def test_cli_scores_every_new_method_and_refuses_bad_settings(tmp_path, tiny_model_dir, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": t} for i, t in enumerate(TEXTS)])
    out = tmp_path / "s.jsonl"
    assert (
        run_cli(
            "score",
            str(data),
            "--model",
            str(tiny_model_dir),
            "--methods",
            "samia,samia_zlib,pac,gradnorm",
            "--samia-samples",
            "2",
            "--pac-copies",
            "2",
            "--gradnorm-norm",
            "2",
            "--gradnorm-params",
            "model.layers.*",
            "--method-seed",
            "3",
            "--out",
            str(out),
            "--quiet",
        )
        == 0
    )
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == [0, 1, 2] and all(
        np.isfinite(r[m]) for r in rows for m in ("samia", "pac", "gradnorm")
    )
    message = fail(
        capsys,
        "score",
        str(data),
        "--model",
        str(tiny_model_dir),
        "--methods",
        "samia",
        "--samia-samples",
        "0",
        "--out",
        str(tmp_path / "x.jsonl"),
    )
    assert (
        "argument --samia-samples: must be a whole number in [1, 1000]" in message
        and not (tmp_path / "x.jsonl").exists()
    )


def test_gradnorm_at_its_default_norm_is_recorded_and_resumed(tmp_path, tiny_model_dir, capsys):
    """inf, the default norm, is no JSON number: the manifest records it as text, and a resume agrees with it."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": i, "text": t} for i, t in enumerate(TEXTS)])
    out = tmp_path / "s.jsonl"
    args = ["score", str(data), "--model", str(tiny_model_dir), "--methods", "gradnorm", "--out", str(out), "--quiet"]
    assert run_cli(*args) == 0
    assert json.loads(Path(f"{out}.manifest.json").read_text())["settings"]["gradnorm_norm"] == "inf"
    assert run_cli(*args, "--resume") == 0
    assert "already scored" in capsys.readouterr().err
