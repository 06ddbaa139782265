"""A suite known to leak, on a sample too small to show it: the report says the suite leaks and that this sample
could not have seen it, instead of only "no sign". By hand, and on an ArxivMIA-shaped fixture of real text."""

import json

import numpy as np
import pytest
from conftest import benchmark_module
from helpers import run_cli, write_jsonl

from mia_fast.data import LEAKAGE
from mia_fast.evaluation import blind, metrics
from mia_fast.evaluation.verdicts import KnownLeak, known_leak_verdict, model_free_verdict

SHARED_DATA, pile_texts = benchmark_module("common").SHARED_DATA, benchmark_module("common").pile_texts


def _results(n: int, blind_p: float) -> dict[str, metrics.MethodMetrics]:
    def column(auroc: float, p: float) -> metrics.MethodMetrics:
        return metrics.MethodMetrics(auroc, (auroc - 0.08, auroc + 0.08), {}, 1.0, n, n, 0, metrics.Significance(p))

    return {"loss": column(0.55, 0.2), "blind_bow": column(0.57, blind_p), "blind_dates": column(0.5, 0.5)}


@pytest.mark.parametrize("n, too_small", [(100, True), (2000, False)])
def test_a_known_leak_is_set_beside_blind_baselines_at_chance(n, too_small):
    known = KnownLeak("arxivmia", LEAKAGE["arxivmia"])
    model_free = model_free_verdict(_results(n, 0.3))
    verdict = known_leak_verdict(model_free, known)
    figure = model_free.details["per_column"]["blind_bow"]
    assert verdict.warning and verdict.min_detectable_auroc == figure
    assert verdict.text.startswith("arxivmia is known to leak: bag of words AUROC 0.60-0.65 on all 2,000 rows")
    if too_small:  # 100 + 100: the bag of words could not likely have seen 0.60
        assert figure > 0.6 and "This sample is too small to show it" in verdict.text
        assert f"a leak below AUROC {figure:.2f} through blind_bow would likely go unseen" in verdict.text
    else:  # 2,000 + 2,000 would likely have: the sample is not the benchmark the figure is of
        assert figure < 0.6 and "suggests this sample differs from the rows that figure was measured on" in verdict.text
    # Nothing to add where the baselines found the leak, or where the suite's leak is not on record.
    assert known_leak_verdict(model_free_verdict(_results(n, 0.001)), known) is None
    assert known_leak_verdict(model_free, KnownLeak("mimir", LEAKAGE["mimir"])) is None


@pytest.mark.skipif(not (SHARED_DATA / "pile_test").is_dir(), reason="../shared/data is not beside the checkout")
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
    assert figure > whole and verdicts["known_leak"]["min_detectable_auroc"] > LEAKAGE["arxivmia"].known_auroc
    unseen = f"no sign that this split leaks through words or dates at this size: a leak below AUROC {figure:.2f}"
    markdown = (report / "report.md").read_text()
    for shown in (markdown, (report / "report.html").read_text(), out):
        assert (
            unseen in shown and "arxivmia is known to leak" in shown and "This sample is too small to show it" in shown
        )
    assert "**arxivmia is known to leak" in markdown  # set apart, as a warning is
    assert np.isclose(verdicts["known_leak"]["recorded_auroc"], 0.60)
