"""audit-unlearning: members planted by fine-tuning, half of them unlearned by gradient ascent; the audit
must flag exactly the others. The rules and the per-group summary by hand; models of two tokenizers;
bad inputs."""

import json

import numpy as np
import pytest
from conftest import save_tiny_llama, train_tokenizer
from helpers import fail, read_jsonl, run_cli, write_jsonl

from mia_fast.api import Detector, ModelConfig
from mia_fast.errors import MiaFastError
from mia_fast.evaluation.thresholds import Threshold
from mia_fast.evaluation.unlearning import RatioRule, ThresholdRule, audit_unlearning
from mia_fast.generation.finetune import FineTuning, fine_tune
from mia_fast.pipeline.models import load_model

# Kept and unlearned texts share no characters but the space, so that the ascent on the unlearned
# ones leaves the kept ones' likelihood nearly where it was, even in a model this small.
KEPT = [
    "222 11 11 77 6 11 00 666 000 77 333 11",
    "0 000 8 666 33 000 33 777 33 333 33 4",
    "666 1 4 555 88 888 33 444 777 666 00 333",
    "66 22 888 5 777 8 222 66 777 00 00 999",
]
UNLEARNED = [
    "thousand lazy miles brown brown journey fox the fox journey",
    "journey fox lazy journey over thousand over dog jumps miles",
    "journey thousand begins the lazy begins journey brown journey journey",
    "fox lazy the dog over thousand journey fox journey lazy",
]


def save(loaded, directory):
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def planted_and_unlearned(tmp_path_factory):
    """(B, C): a tiny model fine-tuned on KEPT + UNLEARNED until it has learned them, then C: B after
    gradient ascent on UNLEARNED."""
    root = tmp_path_factory.mktemp("unlearning")
    base = save_tiny_llama(
        root / "base",
        train_tokenizer({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}),
        seed=0,
        hidden=64,
    )
    loaded = load_model(str(base), device="cpu", dtype="fp32")
    losses = fine_tune(
        loaded, KEPT + UNLEARNED, FineTuning(epochs=40, learning_rate=3e-3, batch_size=8, max_tokens=None)
    )
    assert losses[-1] < 0.2 * losses[0]
    planted = save(loaded, root / "planted")
    ascent = fine_tune(
        loaded, UNLEARNED, FineTuning(epochs=3, learning_rate=1e-4, batch_size=4, max_tokens=None), ascent=True
    )
    assert ascent == sorted(ascent) and ascent[-1] > ascent[0]  # the true loss, rising
    return planted, save(loaded, root / "unlearned")


@pytest.fixture(scope="module")
def planted_jsonl(tmp_path_factory):
    rows = [{"id": f"kept-{i}", "text": t, "book": "kept", "label": 1} for i, t in enumerate(KEPT)]
    rows += [{"id": f"unlearned-{i}", "text": t, "book": "unlearned", "label": 0} for i, t in enumerate(UNLEARNED)]
    return write_jsonl(tmp_path_factory.mktemp("planted") / "planted.jsonl", rows)


def test_ratio_rule_flags_exactly_the_planted_texts_that_were_not_unlearned(
    planted_and_unlearned, planted_jsonl, tmp_path, capsys
):
    planted, unlearned = planted_and_unlearned
    report = tmp_path / "report"
    assert (
        run_cli(
            "audit-unlearning",
            planted_jsonl,
            "--before",
            planted,
            "--after",
            unlearned,
            "--method",
            "mink_0.2",
            "--report",
            report,
            "--group-field",
            "book",
            "--quiet",
        )
        == 0
    )
    rows = read_jsonl(report / "audit.jsonl")
    assert [r["id"] for r in rows if r["flag"]] == [f"kept-{i}" for i in range(4)]
    assert all(r["change"] == pytest.approx(r["after"] - r["before"]) and r["before"] < 0 for r in rows)
    groups = {g["group"]: g for g in json.loads((report / "groups.json").read_text())["groups"]}
    assert (groups["kept"]["flagged"], groups["kept"]["rate"], groups["unlearned"]["flagged"]) == (4, 1.0, 0)
    assert groups["unlearned"]["mean_change"] < groups["kept"]["mean_change"]
    assert (report / "before_after.png").stat().st_size > 10_000
    assert "4 of 8 texts (50.0%) still look like members" in (report / "report.md").read_text()
    table = capsys.readouterr().out
    assert "kept" in table and "unlearned" in table and "total" in table


def test_threshold_rule_from_calibrate_on_the_model_after(planted_and_unlearned, planted_jsonl, tmp_path, capsys):
    planted, unlearned = planted_and_unlearned
    # Validation on the model after: the texts it still holds are members; texts it never saw are not.
    never_seen = ["over the dog brown lazy jumps thousand fox miles the", "7 77 1 11 5 0 22 9 333 44 8 6"]
    validation = write_jsonl(
        tmp_path / "val.jsonl", [{"text": t, "label": 1} for t in KEPT] + [{"text": t, "label": 0} for t in never_seen]
    )
    threshold = tmp_path / "t.json"
    assert (
        run_cli("calibrate", validation, "--model", unlearned, "--method", "mink_0.2", "--out", threshold, "--quiet")
        == 0
    )
    value = json.loads(threshold.read_text())["value"]
    report = tmp_path / "report"
    assert (
        run_cli(
            "audit-unlearning",
            planted_jsonl,
            "--before",
            planted,
            "--after",
            unlearned,
            "--method",
            "mink_0.2",
            "--threshold",
            threshold,
            "--report",
            report,
            "--quiet",
        )
        == 0
    )
    rows = read_jsonl(report / "audit.jsonl")
    assert [r["flag"] for r in rows] == [r["after"] >= value for r in rows]
    assert all(r["flag"] for r in rows if r["id"].startswith("kept"))  # the threshold's own members
    assert {r["group"] for r in rows} == {"all"}
    # Calibrated on the model after, the threshold does not transfer to another model as the one audited.
    message = fail(
        capsys,
        "audit-unlearning",
        planted_jsonl,
        "--before",
        unlearned,
        "--after",
        planted,
        "--method",
        "mink_0.2",
        "--threshold",
        threshold,
        "--report",
        tmp_path / "other",
    )
    assert "calibrated under other scoring settings (model: calibrated with" in message


def test_rules_and_summary_by_hand():
    before = np.array([-2.0, -2.0, -1.0, -1.0, np.nan, -3.0])
    after = np.array([-2.1, -4.0, -0.5, -1.2, -1.0, -3.0])
    groups = ["a", "a", "b", "b", "b", "c"]
    audit = audit_unlearning("loss", before, after, RatioRule("loss", 0.9), "B", "C", groups)
    # kept shares 2/2.1 = 0.95, 0.5, 2, 0.83, unscored, 1
    assert audit.flags.tolist() == [True, False, True, False, False, True]
    summary = {e["group"]: e for e in audit.summary()}
    assert summary["a"] == {
        "group": "a",
        "snippets": 2,
        "scored": 2,
        "flagged": 1,
        "rate": 0.5,
        "mean_change": pytest.approx((-0.1 - 2.0) / 2),
    }
    assert summary["b"] == {
        "group": "b",
        "snippets": 3,
        "scored": 2,
        "flagged": 1,
        "rate": 0.5,
        "mean_change": pytest.approx((0.5 - 0.2) / 2),
    }
    assert summary["c"]["rate"] == 1.0 and summary["c"]["mean_change"] == 0
    total = audit.total()
    assert (total["snippets"], total["scored"], total["flagged"]) == (6, 5, 3)
    threshold = Threshold("loss", -1.1, "accuracy", None, {})
    assert audit_unlearning("loss", before, after, ThresholdRule(threshold, "t.json"), "B", "C").flags.tolist() == [
        False,
        False,
        True,
        False,
        False,
        False,
    ]
    with pytest.raises(MiaFastError, match="must be in"):
        RatioRule("loss", 1.5)


def test_before_and_after_models_of_different_tokenizers(tiny_model_dir, tiny_reference_dir, planted_jsonl, tmp_path):
    report = tmp_path / "report"
    assert (
        run_cli(
            "audit-unlearning",
            planted_jsonl,
            "--before",
            tiny_model_dir,
            "--after",
            tiny_reference_dir,
            "--method",
            "loss",
            "--report",
            report,
            "--quiet",
        )
        == 0
    )
    rows = read_jsonl(report / "audit.jsonl")
    texts = [r["text"] for r in read_jsonl(planted_jsonl)]
    for model, column in ((tiny_model_dir, "before"), (tiny_reference_dir, "after")):
        expected = Detector(ModelConfig(str(model), device="cpu")).score(texts, methods=["loss"])["loss"]
        assert [r[column] for r in rows] == pytest.approx(expected.tolist(), rel=1e-6)
    before_tokens = [r["n_tokens"] for r in read_jsonl(report / "scores-before.jsonl")]
    assert before_tokens != [r["n_tokens"] for r in read_jsonl(report / "scores-after.jsonl")]  # each its own tokenizer


def test_bad_inputs(tiny_model_dir, tiny_reference_dir, planted_jsonl, tmp_path, capsys):
    models = ("--before", tiny_model_dir, "--after", tiny_reference_dir)
    audit = ("audit-unlearning", planted_jsonl, *models)
    assert "unknown method 'nope'" in fail(capsys, *audit, "--method", "nope", "--report", tmp_path / "r")
    threshold = Threshold("mink_0.2", -1.0, "accuracy", None, {}).save(tmp_path / "t.json")
    assert "is a threshold for mink_0.2, not loss" in fail(
        capsys, *audit, "--method", "loss", "--threshold", threshold, "--report", tmp_path / "r"
    )
    assert "argument --ratio: must be a number in (0, 1]" in fail(
        capsys, *audit, "--method", "loss", "--ratio", "1.5", "--report", tmp_path / "r"
    )
    message = fail(capsys, *audit, "--method", "minkpp_0.2", "--report", tmp_path / "r")
    assert "the ratio rule compares mean log-probabilities" in message and "pass --threshold FILE" in message
    assert not (tmp_path / "r").exists()  # each refused before anything was scored
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("earlier work")
    assert "is not empty; pass --overwrite" in fail(capsys, *audit, "--method", "loss", "--report", tmp_path / "full")
    assert (tmp_path / "full" / "kept.txt").read_text() == "earlier work"
    for missing, given in (("--before", models[2:]), ("--after", models[:2])):
        code = run_cli("audit-unlearning", planted_jsonl, *given, "--method", "loss", "--report", tmp_path / "m")
        assert code == 2 and f"the following arguments are required: {missing}" in capsys.readouterr().err
