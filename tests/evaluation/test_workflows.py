"""The workflows behind the commands: eval's report with and without the blind baselines, refusals before any
scoring, the refit shuffles capped, the verdicts on a planted-leak and an i.i.d. split, a suite's known leak on a
sample too small to show it; the suspect and validation sets of dataset inference."""

import json

import numpy as np
import pytest
from conftest import benchmark_module
from helpers import FAST, fail, run_cli, write_jsonl

from evaluation.test_blind import WORDS, random_texts
from mia_fast.data import SUITES
from mia_fast.data.files import Dataset
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.evaluation import blind, metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS
from mia_fast.evaluation.comparison import compare_reports
from mia_fast.evaluation.workflows import (
    SUSPECT,
    VALIDATION,
    CalibrationRule,
    suspect_and_validation,
    unlearning_scores_path,
)

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts


def test_eval_reports_blind_baselines_unless_told_not_to(tiny_model_dir, tmp_path, capsys):
    rows = [
        {"id": i, "text": t, "label": 1} for i, t in enumerate(f"{t} in 1850" for t in random_texts(12, 6, WORDS[:8]))
    ]
    rows += [
        {"id": 12 + i, "text": t, "label": 0}
        for i, t in enumerate(f"{t} in 2025" for t in random_texts(12, 7, WORDS[8:]))
    ]
    data = tmp_path / "leaky.jsonl"
    write_jsonl(data, rows)
    assert (
        run_cli("eval", data, "--model", tiny_model_dir, "--report", tmp_path / "with", "--bootstrap", "50", *FAST) == 0
    )
    out = capsys.readouterr().out
    assert (
        "blind_bow*" in out
        and "blind_dates*" in out
        and "WARNING" in out
        and "cannot be read as membership evidence" in out
    )
    assert set(BLIND_COLUMNS) <= set(json.loads((tmp_path / "with" / "metrics.json").read_text())["methods"])
    assert (
        run_cli(
            "eval",
            data,
            "--model",
            tiny_model_dir,
            "--report",
            tmp_path / "without",
            "--no-blind",
            "--bootstrap",
            "50",
            *FAST,
        )
        == 0
    )
    assert "blind" not in capsys.readouterr().out
    assert not set(BLIND_COLUMNS) & set(json.loads((tmp_path / "without" / "metrics.json").read_text())["methods"])


def test_eval_with_one_member_refuses_before_scoring(tiny_model_dir, tmp_path, capsys):
    rows = [{"text": t, "label": int(i == 0)} for i, t in enumerate(random_texts(8, 8))]
    write_jsonl(tmp_path / "one.jsonl", rows)
    assert "at least 2 members and 2 non-members" in fail(
        capsys, "eval", tmp_path / "one.jsonl", "--model", tiny_model_dir, "--report", tmp_path / "r", *FAST
    )


def test_blind_permutations_caps_the_refit_shuffles_and_the_report_says_what_that_costs(
    tiny_model_dir, tmp_path, capsys
):
    rows = [{"text": f"{t} in 1850", "label": 1} for t in random_texts(12, 6, WORDS[:8])]
    rows += [{"text": f"{t} in 2025", "label": 0} for t in random_texts(12, 7, WORDS[8:])]
    data = write_jsonl(tmp_path / "leaky.jsonl", rows)
    args = ["eval", data, "--model", tiny_model_dir, "--report", tmp_path / "r", "--bootstrap", "50", *FAST]
    assert run_cli(*args, "--blind-permutations", "19") == 0
    out = capsys.readouterr().out
    # 19 shuffles give p >= 1/20, above Holm's 0.05 / 3: not even this perfect leak can show, and the report says so.
    assert "at most 19 refit shuffles per baseline at this size" in out
    assert "even a leak that separates perfectly would likely go unseen (12 + 12 texts)" in out
    model_free = json.loads((tmp_path / "r" / "metrics.json").read_text())["model_free"]
    assert model_free["min_detectable_auroc"] is None and {t["most"] for t in model_free["refit_tests"].values()} == {
        19
    }
    assert "--blind-permutations: must be a whole number in [1, 100000], got '0'" in fail(
        capsys, *args, "--blind-permutations", "0"
    )


def _eval(tiny_model_dir, tmp_path, name, members, nonmembers) -> tuple[str, dict, str]:
    rows = [{"id": i, "text": t, "label": 1} for i, t in enumerate(members)]
    rows += [{"id": len(members) + i, "text": t, "label": 0} for i, t in enumerate(nonmembers)]
    write_jsonl(tmp_path / f"{name}.jsonl", rows)
    report = tmp_path / name
    assert run_cli("eval", tmp_path / f"{name}.jsonl", "--model", tiny_model_dir, "--report", report, *FAST) == 0
    return (report / "report.md").read_text(), json.loads((report / "metrics.json").read_text()), str(report)


def test_the_verdict_names_a_planted_leak_and_finds_none_in_an_iid_split(tiny_model_dir, tmp_path, capsys):
    members = [f"{t}, written in 2026" for t in random_texts(24, 10, WORDS, 16)]
    markdown, payload, leaky = _eval(tiny_model_dir, tmp_path, "leaky", members, random_texts(24, 11, WORDS, 16))
    out = capsys.readouterr().out
    named = "What gives the members away first: ' 2026' (held out, in 24 of 24 members and 0 of 24 non-members"
    assert "**WARNING" in markdown and named in markdown
    assert "WARNING" in out and "' 2026'" in out
    assert payload["model_free"]["columns"] == ["blind_bow", "blind_dates", "blind_ngrams"]
    telltale = payload["model_free"]["telltales"][0]
    assert (telltale["ngram"], telltale["members"], telltale["nonmembers"], telltale["folds"]) == (" 2026", 24, 0, 5)
    assert payload["methods"]["blind_ngrams"]["auroc"] == 1.0 and "No method is above chance" in payload["verdict"]
    assert all(0 < m["significance"]["permutation_p"] <= 1 for m in payload["methods"].values())
    assert payload["verdicts"]["model_free"]["warning"] and 0.5 < payload["model_free"]["min_detectable_auroc"] < 1

    texts = random_texts(48, 12, WORDS, 16)
    markdown, payload, iid = _eval(tiny_model_dir, tmp_path, "iid", texts[:24], texts[24:])
    figure = payload["verdicts"]["model_free"]["min_detectable_auroc"]
    assert "Model-free baselines are at chance" in markdown and "gives the members away" not in markdown
    unseen = f"at this size: a leak below AUROC {figure:.2f} would likely go unseen (24 + 24 texts)"
    assert unseen in markdown and unseen in (tmp_path / "iid" / "report.html").read_text()
    out = capsys.readouterr().out
    assert unseen in out
    assert payload["model_free"]["min_detectable_auroc"] == figure and payload["verdicts"]["model_free"]["power"] == 0.8
    assert {"model_free", "above_chance", "above_model_free"} == set(payload["verdicts"])
    assert all(0.5 < v["min_detectable_auroc"] <= 1 for v in payload["verdicts"].values())
    assert "WARNING" not in markdown and payload["model_free"]["telltales"] == []
    # 24 non-members: TPR at 5% FPR is shown, at 1% and 0.1% it is n/a, in every format.
    assert "n/a (needs ≥ 100 non-members)" in markdown and "n/a (needs ≥ 1,000 non-members)" in markdown
    loss = payload["methods"]["loss"]
    assert loss["tpr_at_fpr"]["1%"] is None and loss["tpr_at_fpr"]["5%"] is not None
    assert loss["tpr_at_fpr_missing"]["1%"].startswith("needs >= 100 non-members")
    assert "n/a: TPR@0.1%FPR needs ≥ 1,000; TPR@1%FPR needs ≥ 100 non-members" in out
    with pytest.warns(MiaFastWarning, match="differ in data"):
        compared = compare_reports(leaky, iid)
    assert "n/a" in compared and "TPR@1%FPR needs ≥ 100 non-members (A and B had fewer)" in compared


@pytest.mark.shared_data
def test_eval_on_a_weak_leak_states_what_the_sample_could_not_see(tiny_model_dir, tmp_path, capsys):
    """The fixture leaks weakly through topic (a bag of words separates all 2,000 rows at about 0.6); its 100 + 100
    sample is one where the baselines stay at chance (about half of such samples are:
    benchmarks/results/blind-null-2core.json), and the report must say it was too small to tell."""
    fixture = benchmark_module("blind_null")
    texts, labels = fixture.weak_leak_fixture(pile_texts)
    whole = metrics.auroc(labels, blind.blind_scores(texts, labels)["blind_bow"])
    assert 0.57 < whole < 0.65
    sample_texts, sample_labels = fixture.weak_sample(texts, labels, seed=0)
    data = write_jsonl(
        tmp_path / "arxivmia.jsonl", [{"text": t, "label": int(y)} for t, y in zip(sample_texts, sample_labels)]
    )
    report = tmp_path / "report"
    args = ["eval", data, "--suite", "arxivmia", "--model", tiny_model_dir, "--report", report]
    assert run_cli(*args, "--methods", "loss", "--bootstrap", "100", "--quiet") == 0
    out = capsys.readouterr().out
    verdicts = json.loads((report / "metrics.json").read_text())["verdicts"]
    figure = verdicts["model_free"]["min_detectable_auroc"]
    assert figure > whole and verdicts["known_leak"]["min_detectable_auroc"] > SUITES["arxivmia"].leakage.known_auroc
    unseen = f"no sign that this split leaks through words or dates at this size: a leak below AUROC {figure:.2f}"
    markdown = (report / "report.md").read_text()
    for shown in (markdown, (report / "report.html").read_text(), out):
        assert (
            unseen in shown and "arxivmia is known to leak" in shown and "This sample is too small to show it" in shown
        )
    assert "**arxivmia is known to leak" in markdown  # set apart, as a warning is
    assert np.isclose(verdicts["known_leak"]["recorded_auroc"], 0.60)


def test_the_suspect_set_comes_first_and_small_or_overlapping_sets_are_refused():
    suspect = Dataset(texts=[f"suspect text {i}" for i in range(10)], ids=None, labels=None)
    validation = Dataset(texts=[f"validation text {i}" for i in range(12)], ids=None, labels=None)
    combined = suspect_and_validation(suspect, validation)
    assert combined.texts == suspect.texts + validation.texts
    assert combined.labels == [SUSPECT] * 10 + [VALIDATION] * 12
    with pytest.raises(MiaFastError, match="the validation set has 9 texts; dataset inference needs at least 10"):
        suspect_and_validation(suspect, Dataset(texts=validation.texts[:9], ids=None, labels=None))
    with pytest.raises(MiaFastError, match="share 1 text"):
        suspect_and_validation(
            suspect, Dataset(texts=[*validation.texts[:9], " suspect text 3 "], ids=None, labels=None)
        )


def test_a_calibration_rule_is_checked_and_each_unlearning_role_has_its_scores_file(tmp_path):
    assert CalibrationRule("loss", "fpr", 0.05).target_fpr == 0.05
    with pytest.raises(MiaFastError, match="rule must be one of"):
        CalibrationRule("loss", "f1")
    with pytest.raises(MiaFastError, match="needs a target FPR"):
        CalibrationRule("loss", "fpr")
    assert unlearning_scores_path(tmp_path, "before") == tmp_path / "scores-before.jsonl"
