"""Passes as values: deduplicated forwards, a prefix that is never scored, hidden-state readouts, and
ReCaLL, the first method built on them."""

import json

import numpy as np
import pytest
import torch
from conftest import CORPUS
from helpers import (
    MEMBER_PREFIX,
    PREFIX,
    count_forwards,
    count_sequences,
    fail,
    read_jsonl,
    run_cli,
    stats_of,
    write_jsonl,
)

from mia_fast import ComputeConfig, ConRecallSettings, Detector, RecallSettings, load_model
from mia_fast.engines.passes import PLAIN, HiddenStatesReadout, Pass, Progress
from mia_fast.errors import MiaFastError
from mia_fast.methods import MethodSettings, resolve_methods
from mia_fast.methods.conrecall import member_prefix_pass
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.lowercase import LOWERCASE
from mia_fast.methods.recall import recall_pass
from mia_fast.pipeline.engine import StatsEngine
from mia_fast.scoring.method_runs import score
from mia_fast.scoring.planner import run_passes


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(str(tiny_model_dir))


# ---- dedupe ----


def test_lowercase_pass_of_lowercase_texts_costs_no_forward(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), compute=ComputeConfig(batch_tokens=64))
    calls = count_forwards(detector.target)
    lower = [t.lower() for t in CORPUS]
    detector.score(lower, methods=["loss"])
    loss_alone = calls[0]
    calls[0] = 0
    scores = detector.score(lower, methods=["loss", "lowercase"])
    assert calls[0] == loss_alone > 0
    np.testing.assert_allclose(scores["lowercase"], 1.0)
    calls[0] = 0
    detector.score(["The Quick Brown Fox", "ALL THAT GLITTERS"] * 20, methods=["loss", "lowercase"])
    with_case = calls[0]
    calls[0] = 0
    detector.score(["The Quick Brown Fox", "ALL THAT GLITTERS"] * 20, methods=["loss"])
    assert with_case > calls[0]  # mixed case: the lowercase pass does run


def test_identical_units_run_once_across_passes_and_texts(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    seen = []
    run_passes(detector.engines, ["a fox", "a fox", "A Fox"], [PLAIN, LOWERCASE], Progress(seen.append))
    one = []
    run_passes(detector.engines, ["a fox", "A Fox"], [PLAIN], Progress(one.append))
    assert seen == one  # 3 texts x 2 passes: the two distinct texts, once each


def test_pass_results_are_in_text_order(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    texts = ["The Fox", "the dog jumps over", "THE FOX"]
    results = run_passes(detector.engines, texts, [PLAIN, LOWERCASE])
    direct = detector.token_stats([t.lower() for t in texts])
    np.testing.assert_array_equal(results[LOWERCASE].offsets, direct.offsets)
    np.testing.assert_allclose(results[LOWERCASE].logp, direct.logp, rtol=1e-6)
    np.testing.assert_array_equal(results[LOWERCASE].first_occurrence, direct.first_occurrence)


# ---- prefixes and hidden states ----


def test_prefix_is_unscored_and_the_text_keeps_its_targets(loaded):
    engine = StatsEngine(loaded)
    texts = ["the quick brown fox", "a"]
    plain = engine.compute(texts)
    prefixed = engine.compute(texts, prefixes=["to be or not to be"] * 2)
    np.testing.assert_array_equal(prefixed.offsets, plain.offsets)
    np.testing.assert_array_equal(prefixed.target_ids, plain.target_ids)
    assert not np.allclose(prefixed.logp, plain.logp)


def test_prefixed_long_text_is_windowed_after_the_prefix(loaded):
    engine = StatsEngine(loaded, max_length=32, batch_tokens=64)
    prefix = "to be or not to be"
    text = " ".join(CORPUS[:4])
    prefix_ids, ids = engine.context_ids(prefix), engine.tokenize([text])[0]
    assert len(ids) > 32 - len(prefix_ids)
    stats = engine.compute([text], prefixes=[prefix])
    assert stats.lengths[0] == len(ids) - 1
    # The first window, computed by hand: the prefix, then the text's first ids, in one forward.
    width = 32 - len(prefix_ids)
    window = torch.tensor([prefix_ids + ids[:width]])
    with torch.inference_mode():
        logp = torch.log_softmax(loaded.model(window).logits[0].double(), -1)
    expected = [logp[len(prefix_ids) + t - 1, ids[t]].item() for t in range(1, width)]
    np.testing.assert_allclose(stats.logp[: width - 1], expected, rtol=1e-5, atol=1e-5)


def test_prefix_longer_than_half_the_window_is_refused(loaded):
    engine = StatsEngine(loaded, max_length=16)
    with pytest.raises(MiaFastError, match="more than half of the 16-token window"):
        engine.compute(["a fox"], prefixes=[" ".join(CORPUS)])


def test_hidden_state_readout_is_the_last_token_after_the_prefix(loaded):
    """Decoder layer 0's output at the last token of (prefix + text), whatever the batching
    (every layer and architecture: test_probe.py)."""
    engine = StatsEngine(loaded, batch_tokens=40)
    texts = ["the quick brown fox jumps", "a", "", "all that glitters is not gold"]
    prefixes = ["", "", "", "to be"]
    got = engine.hidden_states(texts, HiddenStatesReadout((0,)), prefixes=prefixes)
    assert got.shape == (4, 1, loaded.model.config.hidden_size)
    for i, (text, prefix) in enumerate(zip(texts, prefixes)):
        ids = engine.context_ids(prefix) + engine.tokenize([text])[0]
        with torch.inference_mode():
            states = loaded.model(torch.tensor([ids]), output_hidden_states=True).hidden_states
        np.testing.assert_allclose(got[i, 0], states[1][0, -1].numpy(), rtol=1e-4, atol=1e-5)
    every = engine.hidden_states(texts[:1], HiddenStatesReadout())
    assert every.shape[1] == loaded.model.config.num_hidden_layers


def test_hidden_state_pass_through_the_detector(tiny_model_dir):
    detector = Detector(str(tiny_model_dir))
    wrapped = Pass(transform=lambda t: f"statement: {t}", readout=HiddenStatesReadout((1,)))
    result = run_passes(detector.engines, ["a fox", "the dog"], [wrapped])[wrapped]
    direct = detector.target.hidden_states(["statement: a fox", "statement: the dog"], HiddenStatesReadout((1,)))
    np.testing.assert_array_equal(result, direct)


# ---- ReCaLL ----


def test_recall_formula_on_hand_built_stats():
    settings = MethodSettings(RecallSettings(prefix_nonmembers=("shot one. ", "shot two.")))
    assert recall_pass(settings) == Pass(prefix="shot one. shot two.")
    plain = stats_of([-1.0, -3.0], [-0.5], [])
    prefixed = stats_of([-2.0, -4.0], [-2.0], [])
    inputs = ScoringInputs(stats=plain, passes={recall_pass(settings): prefixed}, settings=settings)
    scores = score(inputs, resolve_methods(["recall"]))["recall"]
    assert scores[0] == pytest.approx(3.0 / 2.0)  # loss(x | P) / loss(x)
    assert scores[1] == pytest.approx(2.0 / 0.5)
    assert np.isnan(scores[2])


def test_recall_equals_a_hand_computed_conditional_likelihood(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)])
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be"]
    got = detector.score(texts, methods=["loss", "recall"])
    model, engine = detector.target.loaded.model, detector.target
    prefix_ids = engine.tokenize(["".join(PREFIX)])[0]
    for i, text in enumerate(texts):
        ids = engine.tokenize([text])[0]

        def mean_nll(context: list[int], ids: list[int] = ids) -> float:
            sequence = torch.tensor([context + ids])
            with torch.inference_mode():
                logp = torch.log_softmax(model(sequence).logits[0].double(), -1)
            return -np.mean([logp[len(context) + t - 1, ids[t]].item() for t in range(1, len(ids))])

        assert got["recall"][i] == pytest.approx(mean_nll(prefix_ids) / mean_nll([]), rel=1e-5)
        assert got["loss"][i] == pytest.approx(-mean_nll([]), rel=1e-5)


def test_recall_needs_prefix_texts_that_are_not_scored(tiny_model_dir):
    with pytest.raises(MiaFastError, match="needs known non-member texts for its prefix"):
        Detector(str(tiny_model_dir)).score(["a fox"], methods=["recall"])
    detector = Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)])
    with pytest.raises(MiaFastError, match="1 scored text.* also prefix texts"):
        detector.score(["a fox", PREFIX[1]], methods=["loss", "recall"])
    detector.score(["a fox", PREFIX[1]], methods=["loss"])  # without recall the prefix plays no part


def test_recall_from_the_command_line(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    prefix_file = tmp_path / "prefix.txt"
    prefix_file.write_text("\n".join(PREFIX) + "\n\n")
    out = tmp_path / "s.jsonl"
    assert (
        run_cli(
            "score",
            labelled_jsonl,
            "--model",
            tiny_model_dir,
            "--methods",
            "loss,recall",
            "--prefix-nonmembers",
            prefix_file,
            "--out",
            out,
            "--quiet",
            "--max-length",
            "64",
        )
        == 0
    )
    rows = read_jsonl(out)
    texts = [json.loads(line)["text"] for line in labelled_jsonl.read_text().splitlines()]
    expected = Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)]).score(
        texts, methods=["recall"]
    )["recall"]
    np.testing.assert_allclose([r["recall"] for r in rows], expected, rtol=1e-5)

    prefix_jsonl = write_jsonl(tmp_path / "prefix.jsonl", [{"body": t} for t in PREFIX])
    out2 = tmp_path / "s2.jsonl"
    assert (
        run_cli(
            "score",
            labelled_jsonl,
            "--model",
            tiny_model_dir,
            "--methods",
            "recall",
            "--prefix-nonmembers",
            prefix_jsonl,
            "--text-field",
            "text",
            "--out",
            out2,
            "--quiet",
        )
        == 2
    )
    assert "no 'text' field" in capsys.readouterr().err
    assert "needs known non-member texts" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "recall",
        "--out",
        tmp_path / "s3.jsonl",
    )
    leaky = write_jsonl(tmp_path / "leaky.jsonl", [{"text": PREFIX[0]}, {"text": "a fox"}])
    message = fail(
        capsys,
        "score",
        leaky,
        "--model",
        tiny_model_dir,
        "--methods",
        "recall",
        "--prefix-nonmembers",
        prefix_file,
        "--out",
        tmp_path / "s4.jsonl",
    )
    assert "also prefix texts" in message
    assert not (tmp_path / "s4.jsonl").exists()


# ---- Con-ReCall ----


def test_conrecall_formula_on_hand_built_stats():
    settings = MethodSettings(
        RecallSettings(prefix_nonmembers=("shot one. ",)),
        ConRecallSettings(prefix_members=("member one. ", "member two."), gamma=0.25),
    )
    assert member_prefix_pass(settings) == Pass(prefix="member one. member two.")
    plain = stats_of([-1.0, -3.0], [-0.5], [])
    nonmember = stats_of([-2.0, -4.0], [-2.0], [])
    member = stats_of([-1.0, -1.0], [-0.25], [])
    inputs = ScoringInputs(
        stats=plain, passes={recall_pass(settings): nonmember, member_prefix_pass(settings): member}, settings=settings
    )
    scores = score(inputs, resolve_methods(["conrecall"]))["conrecall"]
    assert scores[0] == pytest.approx((3.0 - 0.25 * 1.0) / 2.0)  # (loss(x | P_non) - γ loss(x | P_mem)) / loss(x)
    assert scores[1] == pytest.approx((2.0 - 0.25 * 0.25) / 0.5)
    assert np.isnan(scores[2])
    with pytest.raises(
        MiaFastError, match=r"ConRecallSettings.gamma \(--conrecall-gamma\) must be a number in \[-100, 100\]"
    ):
        ConRecallSettings(gamma=float("nan"))


def test_conrecall_equals_hand_computed_conditional_likelihoods_and_shares_recalls_pass(tiny_model_dir):
    detector = Detector(
        str(tiny_model_dir),
        [RecallSettings(prefix_nonmembers=PREFIX), ConRecallSettings(prefix_members=MEMBER_PREFIX)],
    )
    sequences = count_sequences(detector.target)
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be"]
    got = detector.score(texts, methods=["loss", "recall", "conrecall"])
    assert sequences[0] == 3 * len(
        texts
    )  # plain, non-member prefix, member prefix; recall's prefix pass serves conrecall too
    model, engine = detector.target.loaded.model, detector.target
    for i, text in enumerate(texts):
        ids = engine.tokenize([text])[0]

        def mean_nll(prefix: str, ids: list[int] = ids) -> float:
            context = engine.tokenize([prefix])[0] if prefix else []
            with torch.inference_mode():
                logp = torch.log_softmax(model(torch.tensor([context + ids])).logits[0].double(), -1)
            return -np.mean([logp[len(context) + t - 1, ids[t]].item() for t in range(1, len(ids))])

        plain, nonmember, member = mean_nll(""), mean_nll("".join(PREFIX)), mean_nll("".join(MEMBER_PREFIX))
        assert got["conrecall"][i] == pytest.approx((nonmember - 0.5 * member) / plain, rel=1e-5)
        assert got["recall"][i] == pytest.approx(nonmember / plain, rel=1e-5)


def test_conrecall_needs_both_prefixes_and_refuses_scoring_a_prefix_text(tiny_model_dir):
    with pytest.raises(MiaFastError, match="needs known member texts for its prefix"):
        Detector(str(tiny_model_dir), [RecallSettings(prefix_nonmembers=PREFIX)]).score(
            ["a fox"], methods=["conrecall"]
        )
    with pytest.raises(MiaFastError, match="needs known non-member texts for its prefix"):
        Detector(str(tiny_model_dir), [ConRecallSettings(prefix_members=MEMBER_PREFIX)]).score(
            ["a fox"], methods=["conrecall"]
        )
    detector = Detector(
        str(tiny_model_dir),
        [RecallSettings(prefix_nonmembers=PREFIX), ConRecallSettings(prefix_members=MEMBER_PREFIX)],
    )
    with pytest.raises(MiaFastError, match="1 scored text.* also prefix texts"):
        detector.score(["a fox", MEMBER_PREFIX[0]], methods=["conrecall"])
    detector.score(["a fox", MEMBER_PREFIX[0]], methods=["recall"])  # the member prefix is not recall's


def test_conrecall_from_the_command_line(tiny_model_dir, labelled_jsonl, tmp_path, capsys):
    nonmembers, members = tmp_path / "nonmembers.txt", tmp_path / "members.txt"
    nonmembers.write_text("\n".join(PREFIX) + "\n")
    members.write_text("\n".join(MEMBER_PREFIX) + "\n")
    out = tmp_path / "s.jsonl"
    assert (
        run_cli(
            "score",
            labelled_jsonl,
            "--model",
            tiny_model_dir,
            "--methods",
            "conrecall",
            "--prefix-nonmembers",
            nonmembers,
            "--prefix-members",
            members,
            "--conrecall-gamma",
            "0.8",
            "--out",
            out,
            "--quiet",
        )
        == 0
    )
    texts = [json.loads(line)["text"] for line in labelled_jsonl.read_text().splitlines()]
    detector = Detector(
        str(tiny_model_dir),
        [RecallSettings(prefix_nonmembers=PREFIX), ConRecallSettings(prefix_members=MEMBER_PREFIX, gamma=0.8)],
    )
    np.testing.assert_allclose(
        [r["conrecall"] for r in read_jsonl(out)], detector.score(texts, methods=["conrecall"])["conrecall"], rtol=1e-5
    )
    assert "needs known member texts" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "conrecall",
        "--prefix-nonmembers",
        nonmembers,
        "--out",
        tmp_path / "s2.jsonl",
    )
    assert "No such file" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "conrecall",
        "--prefix-nonmembers",
        nonmembers,
        "--prefix-members",
        tmp_path / "missing.txt",
        "--out",
        tmp_path / "s3.jsonl",
    )
    leaky = write_jsonl(tmp_path / "leaky.jsonl", [{"text": MEMBER_PREFIX[1]}, {"text": "a fox"}])
    assert "also prefix texts" in fail(
        capsys,
        "score",
        leaky,
        "--model",
        tiny_model_dir,
        "--methods",
        "conrecall",
        "--prefix-nonmembers",
        nonmembers,
        "--prefix-members",
        members,
        "--out",
        tmp_path / "s4.jsonl",
    )
    assert "argument --conrecall-gamma: must be a number in [-100, 100]" in fail(
        capsys,
        "score",
        labelled_jsonl,
        "--model",
        tiny_model_dir,
        "--methods",
        "conrecall",
        "--prefix-nonmembers",
        nonmembers,
        "--prefix-members",
        members,
        "--conrecall-gamma",
        "nan",
        "--out",
        tmp_path / "s5.jsonl",
    )
    assert not any((tmp_path / f"s{i}.jsonl").exists() for i in (2, 3, 4, 5))
