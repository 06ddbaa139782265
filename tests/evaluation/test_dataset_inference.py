"""Dataset inference: the normalisation and the t-test by hand, the p-value against the number of texts
on shifted and unshifted sets, the false-positive check, and the command with its bad inputs."""

import json

import numpy as np
import pytest
from helpers import fail, run_cli, write_jsonl

from mia_fast.errors import MiaFastError
from mia_fast.evaluation.dataset_inference import MIN_TEXTS, SIGNIFICANCE, dataset_inference, normalise, welch_p_value


def features(n: int, shift: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"strong": rng.normal(shift, 1, n), "noise": rng.normal(0, 1, n), "weak": rng.normal(shift / 3, 1, n)}


def test_normalise_clips_at_pooled_percentiles_then_uses_the_suspect_statistics():
    suspect = np.arange(40, dtype=np.float64)[:, None]
    validation = np.full((40, 1), 1000.0)  # pushes the pooled 97.5th percentile to 1000
    s, v = normalise(suspect, validation)
    low = np.percentile(np.r_[suspect[:, 0], validation[:, 0]], 2.5)
    clipped = np.clip(suspect[:, 0], low, None)
    assert s[:, 0] == pytest.approx((clipped - clipped.mean()) / clipped.std())
    assert v[:, 0] == pytest.approx((1000 - clipped.mean()) / clipped.std())
    constant_s, _ = normalise(np.ones((20, 1)), np.ones((20, 1)))
    assert np.all(constant_s == 0)  # a constant feature is not divided by zero


def test_welch_p_value_by_hand():
    from scipy.stats import t as student

    a, b = np.array([1.0, 2.0, 4.0, 7.0]), np.array([0.0, 1.0, 1.5])
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    statistic = (a.mean() - b.mean()) / np.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    assert welch_p_value(a, b) == pytest.approx(student.sf(statistic, dof), rel=1e-10)
    assert welch_p_value(b, a) == pytest.approx(1 - student.sf(statistic, dof), rel=1e-10)  # one-sided
    assert welch_p_value(np.ones(3), np.ones(3)) == 1.0 and welch_p_value(np.ones(3), np.zeros(2)) == 0.0


def test_a_shifted_set_is_found_with_p_falling_with_the_texts_and_an_unshifted_one_is_not():
    shifted = dataset_inference(features(300, 0.5, 1), features(300, 0.0, 2), ["strong", "noise", "weak"])
    test = shifted.test
    assert (
        test.sizes == [2, 5, 10, 20, 50, 100, 150] and test.test_texts == (150, 150) and test.train_texts == (150, 150)
    )
    assert test.p_value < 0.01 and shifted.member
    assert test.p_values[-1] < test.p_values[3] < test.p_values[1]  # falls with the number of texts
    assert test.weights["strong"] > abs(test.weights["noise"])
    assert shifted.false_positive_check.p_value > SIGNIFICANCE
    same = dataset_inference(features(300, 0.0, 3), features(300, 0.0, 4), ["strong", "noise", "weak"])
    assert not same.member and min(same.test.p_values) > SIGNIFICANCE / 5
    assert "no evidence" in same.summary() and "passed" in same.summary()
    # 150 + 150 held out: a shift the outputs separate at AUROC below about 0.58 would likely go unseen.
    assert same.min_detectable_auroc == pytest.approx(0.58, abs=0.01) and shifted.min_detectable_auroc == (
        same.min_detectable_auroc
    )
    unseen = f"below AUROC {same.min_detectable_auroc:.2f} would likely go unseen (150 + 150 held-out texts)"
    assert unseen in same.summary() and "unseen" not in shifted.summary()
    assert same.to_dict()["min_detectable_auroc"] == same.min_detectable_auroc


def test_seeded_and_rows_with_nan_left_out():
    suspect, validation = features(60, 0.5, 5), features(60, 0.0, 6)
    first = dataset_inference(suspect, validation, ["strong", "weak"], seed=3)
    assert first == dataset_inference(suspect, validation, ["strong", "weak"], seed=3)
    suspect["weak"][:4] = np.nan
    assert dataset_inference(suspect, validation, ["strong", "weak"]).test.test_texts == (28, 30)


def test_bad_inputs_are_refused_clearly():
    with pytest.raises(MiaFastError, match=f"at least {MIN_TEXTS} validation texts"):
        dataset_inference(features(30, 0, 1), features(MIN_TEXTS - 1, 0, 2), ["strong"])
    with pytest.raises(MiaFastError, match="no score column for feature"):
        dataset_inference(features(30, 0, 1), features(30, 0, 2), ["strong", "absent"])
    with pytest.raises(MiaFastError, match="at least one feature"):
        dataset_inference(features(30, 0, 1), features(30, 0, 2), [])


def test_the_command_scores_both_sets_once_and_writes_the_report(tiny_model_dir, tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over the lazy dog while rain falls on spain".split()
    for name, count in (("suspect", 14), ("validation", 12)):
        write_jsonl(tmp_path / f"{name}.jsonl", [{"text": " ".join(rng.choice(words, 10))} for _ in range(count)])
    report = tmp_path / "di"
    assert (
        run_cli(
            "dataset-inference",
            tmp_path / "suspect.jsonl",
            tmp_path / "validation.jsonl",
            "--model",
            tiny_model_dir,
            "--report",
            report,
            "--k",
            "0.2,0.5",
            "--neighbor-count",
            "2",
            "--quiet",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "dataset inference: p = " in out and "false-positive check" in out
    payload = json.loads((report / "dataset_inference.json").read_text())
    assert payload["features"] == [
        "loss",
        "zlib",
        "mink_0.2",
        "mink_0.5",
        "minkpp_0.2",
        "minkpp_0.5",
        "lowercase",
        "neighbor",
    ]
    assert payload["test"]["test_texts"] == [7, 6] and 0 <= payload["test"]["p_value"] <= 1
    assert 0.5 < payload["min_detectable_auroc"] < 1 and payload["power"] == 0.8
    scores = [json.loads(line) for line in (report / "scores.jsonl").read_text().splitlines()]
    assert [r["suspect"] for r in scores] == [1] * 14 + [0] * 12
    for name in ("p_values.png", "report.md"):
        assert (report / name).stat().st_size > 0


def test_the_command_refuses_a_small_validation_set_before_loading_a_model(tmp_path, capsys):
    write_jsonl(tmp_path / "suspect.jsonl", [{"text": f"text {i}"} for i in range(12)])
    write_jsonl(tmp_path / "validation.jsonl", [{"text": f"other {i}"} for i in range(5)])
    message = fail(
        capsys,
        "dataset-inference",
        tmp_path / "suspect.jsonl",
        tmp_path / "validation.jsonl",
        "--model",
        tmp_path / "no-such-model",
        "--report",
        tmp_path / "di",
    )
    assert "the validation set has 5 texts; dataset inference needs at least 10" in message
    assert not (tmp_path / "di").exists()
