"""The evaluation a sceptical reviewer accepts: the permutation control (exact against full enumeration), Holm's
correction, TPR only where the non-members resolve the FPR, the greedy n-gram blind baseline by hand, and the
verdicts on a planted-leak and an i.i.d. fixture."""

import itertools
import json
import math

import numpy as np
import pytest
from helpers import FAST, run_cli, write_jsonl
from scipy import sparse
from test_blind import WORDS, random_texts
from test_experiments import corpus_texts

from mia_fast.errors import MiaFastWarning
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import _greedy_scores, greedy_ngram_selection
from mia_fast.evaluation.report import compare_reports, format_table, write_report


def exact_permutation_p(labels: np.ndarray, scores: np.ndarray) -> float:
    """The share of every relabelling with as many members whose AUROC reaches the observed one."""
    observed = metrics.auroc(labels, scores)
    n, members = len(labels), int(labels.sum())
    reached = total = 0
    for chosen in itertools.combinations(range(n), members):
        relabelled = np.zeros(n, dtype=int)
        relabelled[list(chosen)] = 1
        reached += metrics.auroc(relabelled, scores) >= observed - 1e-12
        total += 1
    return reached / total


@pytest.mark.parametrize(
    "scores",
    [
        [0.9, 0.8, 0.7, 0.3, 0.2, 0.1, 0.05],  # perfectly separated: only the true labelling reaches it
        [0.9, 0.2, 0.7, 0.3, 0.8, 0.1, 0.5],
        [1.0, 1.0, 0.5, 1.0, 0.5, 0.5, 0.0],  # ties count one half, in both
    ],
)
def test_the_permutation_p_value_matches_full_enumeration(scores):
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    exact = exact_permutation_p(labels, np.asarray(scores))
    estimate = metrics.permutation_pvalues(labels, {"m": np.asarray(scores)}, permutations=40_000, seed=3)["m"]
    assert estimate == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 40_000) + 1e-4)


def test_permutation_p_values_are_seeded_paired_and_bounded():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(50), np.zeros(50)].astype(int)
    columns = {"separates": labels + 0.01 * rng.normal(size=100), "constant": np.ones(100)}
    first = metrics.permutation_pvalues(labels, columns, permutations=300, seed=1)
    assert first == metrics.permutation_pvalues(labels, columns, permutations=300, seed=1)
    assert first["separates"] == 1 / 301  # no shuffle reaches AUROC 1
    assert first["constant"] == 1.0  # every shuffle ties at 0.5
    evaluated = metrics.evaluate(labels, columns, resamples=50, permutations=300, seed=1)
    assert evaluated["separates"].significance.permutation_p == first["separates"]


def test_under_the_null_the_p_values_are_uniform():
    labels = np.r_[np.ones(20), np.zeros(20)].astype(int)
    rng = np.random.default_rng(5)
    pvalues = [
        metrics.permutation_pvalues(labels, {"noise": rng.normal(size=40)}, permutations=200, seed=s)["noise"]
        for s in range(200)
    ]
    assert 0.02 < np.mean(np.array(pvalues) < 0.1) < 0.2 and 0.4 < np.mean(pvalues) < 0.6


def test_holm_by_hand():
    # Sorted p: .001 <= .05/4, .011 <= .05/3, .03 > .05/2: stops there, so .03 and .04 stay although both < .05.
    assert metrics.holm_rejections({"a": 0.011, "b": 0.001, "c": 0.03, "d": 0.04}) == {"a", "b"}
    assert metrics.holm_rejections({"a": 0.2}) == set()


def test_tpr_is_reported_only_where_the_nonmembers_resolve_the_fpr():
    rng = np.random.default_rng(1)
    for nonmembers, shown in ((32, {"5%"}), (99, {"5%"}), (100, {"1%", "5%"}), (1000, {"0.1%", "1%", "5%"})):
        labels = np.r_[np.ones(20), np.zeros(nonmembers)].astype(int)
        result = metrics.evaluate(labels, {"m": labels + rng.normal(size=len(labels))}, resamples=20)["m"]
        assert {k for k, v in result.tpr_at_fpr.items() if v is not None} == shown
        missing = result.to_dict().get("tpr_at_fpr_missing", {})
        assert set(missing) == {"0.1%", "1%", "5%"} - shown
        if "1%" in missing:
            assert missing["1%"].startswith(f"needs >= 100 non-members; with {nonmembers} the smallest non-zero FPR")


def test_the_paired_margin_over_the_best_baseline():
    rng = np.random.default_rng(2)
    labels = np.r_[np.ones(100), np.zeros(100)].astype(int)
    columns = {
        "strong": 3 * labels + rng.normal(size=200),
        "weak": 0.3 * labels + rng.normal(size=200),
        "blind_a": 0.8 * labels + rng.normal(size=200),
        "blind_b": rng.normal(size=200),
    }
    results = metrics.evaluate(labels, columns, resamples=300, baselines=("blind_a", "blind_b"))
    assert (
        results["strong"].significance.over_baseline_ci[0] > 0 and results["weak"].significance.over_baseline_ci[1] < 0
    )
    assert (
        results["blind_a"].significance.over_baseline_ci is None
        and results["blind_b"].significance.over_baseline_ci is None
    )
    assert metrics.evaluate(labels, columns, resamples=20)["strong"].significance.over_baseline_ci is None


def test_greedy_selection_by_hand():
    # n-grams: x (members 0, 1; non-member 0), y (member 2; none), z (members 1, 2; non-members 0, 1), w (non-member 1)
    holds = {"x": [0, 1, 3], "y": [2], "z": [1, 2, 3, 4], "w": [4]}
    labels = np.array([1, 1, 1, 0, 0])  # rows 3 and 4 are the non-members
    matrix = sparse.csr_matrix(
        np.array([[row in holds[n] for n in ("w", "x", "y", "z")] for row in range(5)], dtype=np.float32)
    )
    lengths = np.ones(4, dtype=int)
    selection = greedy_ngram_selection(matrix, labels, lengths)
    # Ratios: x 2/2, y 1/1, z 2/3: x and y tie at 1 and x comes first; then y flags member 2 and no member is left.
    assert selection.columns.tolist() == [1, 2] and selection.nonmembers_flagged.tolist() == [1, 1]
    scores = _greedy_scores(selection, matrix)
    # A row flagged at step s scores -(non-members flagged by then + s/3)/2; a row no n-gram flags, -(2 + 2/3)/2.
    assert scores.tolist() == pytest.approx([-0.5, -0.5, -(1 + 1 / 3) / 2, -0.5, -(2 + 2 / 3) / 2])
    longer = greedy_ngram_selection(matrix, labels, np.array([1, 1, 2, 1]))
    assert longer.columns[0] == 2  # a tie goes to the longer n-gram


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


def test_the_demo_report_shows_na_below_its_resolution(tiny_model_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"text": t} for t in corpus_texts(64)])
    args = ["demo", "--model", tiny_model_dir, "--corpus", corpus, "--texts", "64", "--epochs", "1"]
    args += ["--max-tokens", "16", "--methods", "loss,zlib", "--bootstrap", "20", "--quiet", "--report", tmp_path / "r"]
    assert run_cli(*args) == 0
    markdown = (tmp_path / "r" / "report.md").read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| loss |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:6] == ["n/a (needs ≥ 1,000 non-members)", "n/a (needs ≥ 100 non-members)"]
    assert float(cells[6]) >= 0  # TPR@5%FPR: 32 non-members resolve it
    loss = json.loads((tmp_path / "r" / "metrics.json").read_text())["methods"]["loss"]
    assert loss["n_nonmembers"] == 32 and loss["tpr_at_fpr"]["0.1%"] is None and loss["tpr_at_fpr"]["5%"] is not None
    assert "1/32" in loss["tpr_at_fpr_missing"]["0.1%"]
    # --bootstrap reaches the design (it once landed in another field, and the CI was one resample wide).
    assert loss["auroc_ci"][0] < loss["auroc_ci"][1] and loss["auroc_ci"][0] <= loss["auroc"] <= loss["auroc_ci"][1]
    # Every verdict carries its minimum detectable AUROC, in metrics.json and in the words of a negative one.
    verdicts = json.loads((tmp_path / "r" / "metrics.json").read_text())["verdicts"]
    assert set(verdicts) == {"model_free", "above_chance", "above_model_free"}
    model_free = verdicts["model_free"]
    assert 0.5 < model_free["min_detectable_auroc"] < 1 and model_free["alpha"] == pytest.approx(0.05 / 3)
    if not model_free["warning"] and "at chance" in model_free["text"]:
        assert f"a leak below AUROC {model_free['min_detectable_auroc']:.2f} would likely go unseen" in markdown


def test_the_text_table_and_report_hold_the_permutation_column(tmp_path):
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    columns = {"loss": labels + np.random.default_rng(0).normal(size=60)}
    results = metrics.evaluate(labels, columns, resamples=20)
    assert "perm. p" in format_table(results).splitlines()[0]
    write_report(tmp_path, labels, columns, results, {})
    assert "| method | AUROC | 95% CI | perm. p |" in (tmp_path / "report.md").read_text()
