"""The neighbourhood attack: its formula, one pass per neighbour rank with every duplicate forward
saved, neighbours read from the data or made by a masked LM or without a model, and the bad inputs."""

import numpy as np
import pytest
import torch
from conftest import SENTENCES
from helpers import MEMBER_PREFIX, PREFIX, count_sequences, fail, read_jsonl, run_cli, stats_of, write_jsonl

from mia_fast import Detector
from mia_fast.data import Fields, read_dataset
from mia_fast.errors import MiaFastError
from mia_fast.generation.neighbors import MaskedLMNeighbors, Neighbors
from mia_fast.methods import ConRecallSettings, MethodSettings, NeighborSettings, RecallSettings, resolve_methods
from mia_fast.methods.inputs import ScoringInputs
from mia_fast.methods.neighbor import neighbor_passes
from mia_fast.scoring.method_runs import score

TEXTS = ["the quick brown fox", "to be or not to be"]
NEIGHBORS = [["the quick brown cat", "the slow brown fox", "to be or not to be"], ["to see or not to see"]]


def test_formula_on_hand_built_stats_with_ragged_and_missing_neighbours():
    neighbors = Neighbors.of_texts(["a", "b", "c"], [["a1", "a2"], ["b1"], []])
    settings = MethodSettings(NeighborSettings(neighbors))
    first, second = neighbor_passes(settings)
    assert first.transform("a") == "a1" and second.transform("b") == "" and first.transform("c") == ""
    plain = stats_of([-1.0, -3.0], [-0.5], [-2.0])
    passes = {first: stats_of([-3.0], [-1.5], []), second: stats_of([-4.0, -6.0], [], [])}
    got = score(ScoringInputs(stats=plain, passes=passes, settings=settings), resolve_methods(["neighbor"]))["neighbor"]
    assert got[0] == pytest.approx((3.0 + 5.0) / 2 - 2.0)  # mean neighbour loss − loss
    assert got[1] == pytest.approx(1.5 - 0.5)  # its one neighbour only
    assert np.isnan(got[2])  # no neighbours


def test_equals_hand_computed_losses_and_runs_each_distinct_sequence_once(tiny_model_dir):
    detector = Detector(str(tiny_model_dir), [NeighborSettings(Neighbors.of_texts(TEXTS, NEIGHBORS))])
    model, engine = detector.target.loaded.model, detector.target
    sequences = count_sequences(engine)
    got = detector.score(TEXTS, methods=["loss", "neighbor"])
    # 2 texts + 4 neighbours, one of which is the other scored text: 5 distinct sequences.
    assert sequences[0] == 5

    def loss(text: str) -> float:
        ids = engine.tokenize([text])[0]
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        return -np.mean([logp[t - 1, ids[t]].item() for t in range(1, len(ids))])

    for i, text in enumerate(TEXTS):
        expected = np.mean([loss(n) for n in NEIGHBORS[i]]) - loss(text)
        assert got["neighbor"][i] == pytest.approx(expected, rel=1e-5)


def test_every_pass_of_the_prefix_and_neighbour_methods_runs_once(tiny_model_dir):
    neighbors = [[f"{t} indeed", f"so {t}", f"{t} again"] for t in TEXTS]
    detector = Detector(
        str(tiny_model_dir),
        [
            RecallSettings(prefix_nonmembers=PREFIX),
            ConRecallSettings(prefix_members=MEMBER_PREFIX),
            NeighborSettings(Neighbors.of_texts(TEXTS, neighbors)),
        ],
    )
    sequences = count_sequences(detector.target)
    scores = detector.score(TEXTS, methods=["recall", "conrecall", "neighbor", "loss", "mink", "minkpp"], k=[0.2])
    # Per text: one plain pass (loss, mink, minkpp), one per prefix (recall shares conrecall's), one per neighbour.
    assert sequences[0] == len(TEXTS) * (1 + 2 + 3)
    assert all(np.isfinite(values).all() for values in scores.values())


def test_bad_neighbours_are_refused(tiny_model_dir):
    with pytest.raises(MiaFastError, match="needs the neighbour texts of every scored text"):
        Detector(str(tiny_model_dir)).score(TEXTS, methods=["neighbor"])
    with pytest.raises(MiaFastError, match="1 scored text.* no neighbour list"):  # given for another set of texts
        Detector(str(tiny_model_dir), [NeighborSettings(Neighbors.of_texts(TEXTS[:1], NEIGHBORS[:1]))]).score(
            TEXTS, methods=["neighbor"]
        )
    with pytest.raises(MiaFastError, match="appears twice with different neighbours"):
        Neighbors.of_texts(["a", "a"], [["b"], ["c"]])


@pytest.mark.parametrize(
    ("value", "found"), [("the fox", "a str"), (["ok", 3], "a list holding non-texts"), (None, "a NoneType")]
)
def test_a_neighbour_field_of_the_wrong_type_is_refused(tmp_path, value, found):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a", "neighbors": ["b"]}, {"text": "c", "neighbors": value}])
    with pytest.raises(MiaFastError, match=f"line 2: 'neighbors' is {found}, not a list of texts"):
        read_dataset(path, Fields(neighbors="neighbors"))
    missing = write_jsonl(tmp_path / "m.jsonl", [{"text": "a"}])
    with pytest.raises(MiaFastError, match="'neighbors' is missing"):
        read_dataset(missing, Fields(neighbors="neighbors"))


def test_neighbours_from_a_data_field_on_the_command_line(tiny_model_dir, tmp_path, capsys):
    rows = [{"id": i, "text": t, "label": i % 2, "neighbors": n} for i, (t, n) in enumerate(zip(TEXTS, NEIGHBORS))]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "s.jsonl"
    assert (
        run_cli(
            "score",
            data,
            "--model",
            tiny_model_dir,
            "--methods",
            "loss,neighbor",
            "--neighbor-field",
            "neighbors",
            "--out",
            out,
            "--quiet",
        )
        == 0
    )
    expected = Detector(str(tiny_model_dir), [NeighborSettings(Neighbors.of_texts(TEXTS, NEIGHBORS))]).score(
        TEXTS, methods=["neighbor"]
    )["neighbor"]
    np.testing.assert_allclose([r["neighbor"] for r in read_jsonl(out)], expected, rtol=1e-5)

    assert "needs the neighbour texts" in fail(
        capsys, "score", data, "--model", tiny_model_dir, "--methods", "neighbor", "--out", tmp_path / "s2.jsonl"
    )
    wrong = write_jsonl(tmp_path / "w.jsonl", [{**rows[0], "neighbors": "not a list"}])
    assert "not a list of texts" in fail(
        capsys,
        "score",
        wrong,
        "--model",
        tiny_model_dir,
        "--methods",
        "neighbor",
        "--neighbor-field",
        "neighbors",
        "--out",
        tmp_path / "s3.jsonl",
    )
    assert not (tmp_path / "s2.jsonl").exists() and not (tmp_path / "s3.jsonl").exists()


# ---- generated neighbours ----


def test_generated_neighbours_score_like_the_same_neighbours_given(tiny_model_dir, tiny_masked_lm, tmp_path):
    generator = MaskedLMNeighbors(count=3, model_name=str(tiny_masked_lm), cache=tmp_path)
    got = Detector(str(tiny_model_dir), [NeighborSettings(generator)]).score(SENTENCES, methods=["neighbor"])[
        "neighbor"
    ]
    given = Neighbors.of_texts(SENTENCES, [generator.of(t) for t in SENTENCES])
    np.testing.assert_array_equal(
        got, Detector(str(tiny_model_dir), [NeighborSettings(given)]).score(SENTENCES, methods=["neighbor"])["neighbor"]
    )


def test_masked_lm_neighbours_from_the_command_line_and_a_model_that_fails(
    tiny_model_dir, tiny_masked_lm, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MIA_FAST_CACHE", str(tmp_path / "cache"))
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in SENTENCES])
    out = tmp_path / "s.jsonl"
    assert (
        run_cli(
            "score",
            data,
            "--model",
            tiny_model_dir,
            "--methods",
            "neighbor",
            "--neighbor-model",
            tiny_masked_lm,
            "--neighbor-count",
            "3",
            "--out",
            out,
            "--quiet",
        )
        == 0
    )
    expected = Detector(
        str(tiny_model_dir), [NeighborSettings(MaskedLMNeighbors(count=3, model_name=str(tiny_masked_lm)))]
    ).score(SENTENCES, methods=["neighbor"])
    np.testing.assert_allclose([r["neighbor"] for r in read_jsonl(out)], expected["neighbor"], rtol=1e-6)
    assert any((tmp_path / "cache" / "neighbors").iterdir())

    for bad in (tmp_path / "nowhere", tiny_model_dir):  # missing, and a causal LM
        message = fail(
            capsys,
            "score",
            data,
            "--model",
            tiny_model_dir,
            "--methods",
            "neighbor",
            "--neighbor-model",
            bad,
            "--out",
            tmp_path / "s2.jsonl",
        )
        assert "could not load the masked LM" in message
    assert "argument --neighbor-count: must be a whole number in [1, 1000]" in fail(
        capsys,
        "score",
        data,
        "--model",
        tiny_model_dir,
        "--methods",
        "neighbor",
        "--neighbor-model",
        "word-drop",
        "--neighbor-count",
        "0",
        "--out",
        tmp_path / "s2.jsonl",
    )
    both = write_jsonl(tmp_path / "b.jsonl", [{"text": t, "n": ["x"]} for t in SENTENCES])
    assert "not both" in fail(
        capsys,
        "score",
        both,
        "--model",
        tiny_model_dir,
        "--methods",
        "neighbor",
        "--neighbor-field",
        "n",
        "--neighbor-model",
        "word-drop",
        "--out",
        tmp_path / "s2.jsonl",
    )
    assert not (tmp_path / "s2.jsonl").exists()


def test_the_demo_refuses_a_masked_lm_that_fails_before_fine_tuning(tiny_model_dir, tmp_path, capsys):
    message = fail(
        capsys,
        "demo",
        "--report",
        tmp_path / "r",
        "--model",
        tiny_model_dir,
        "--methods",
        "loss,neighbor",
        "--neighbor-model",
        tmp_path / "nowhere",
        "--quiet",
    )
    assert "could not load the masked LM" in message and not any((tmp_path / "r").glob("*"))
