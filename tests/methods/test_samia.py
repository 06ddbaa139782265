"""SaMIA: ROUGE-1 recall and the halves by hand, scores from hand-built samples, sampling that does not depend on
the batch (the keyed Gumbel noise it draws with), and the one generation samia and samia_zlib share."""

import numpy as np
import pytest
import torch
from helpers import fail, read_jsonl, record_generations, run_cli, write_jsonl

from mia_fast import ComputeConfig, Detector
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.samia import FirstHalf, SamiaSettings, rouge1_recall, samia_pass, zlib_size
from mia_fast.pipeline.sampling import gumbel_noise
from mia_fast.scoring.method_runs import score
from mia_fast.scoring.planner import run_passes

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "to be or not to be that is the question",
    "hello world again and again",
]


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
    calls = record_generations(monkeypatch)
    detector = Detector(str(tiny_model_dir), [SamiaSettings(samples=4)])
    detector.score(TEXTS, methods=["samia", "samia_zlib"])
    rows = [
        (prompt, len(prompt_keys), new)
        for prompts, keys, new_tokens, *_ in calls
        for prompt, prompt_keys, new in zip(prompts, keys, new_tokens)
    ]
    assert len(rows) == len(TEXTS) and all(samples == 4 for _, samples, _ in rows)  # each prompt once, 4 samples
    halves = {tuple(ids) for ids in detector.target.tokenize([FirstHalf()(t) for t in TEXTS])}
    assert {tuple(prompt) for prompt, _, _ in rows} == halves
    assert all(new == len(prompt) - 1 for prompt, _, new in rows)  # as many tokens as the prompt, bar its start token


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


def test_a_sample_count_out_of_range_is_refused_before_any_model_is_loaded():
    with pytest.raises(
        MiaFastError, match=r"SamiaSettings.samples \(--samia-samples\) must be a whole number in \[1, 1000\]"
    ):
        SamiaSettings(samples=0)
