"""The verdicts in plain words: what a blind baseline means beside the methods (a leak only where Holm's correction
over the baselines finds one), and a suite known to leak set beside baselines at chance on a sample too small to
show it."""

import pytest

from evaluation.test_columns import method_metrics
from mia_fast.data import SUITES
from mia_fast.evaluation import metrics
from mia_fast.evaluation.verdicts import KnownLeak, known_leak_verdict, model_free_verdict


@pytest.mark.parametrize(
    "blind, method, expected",
    [
        ((0.55, 0.40, 0.70, 0.3), (0.90, 0.85, 0.95), "at chance"),
        ((0.97, 0.93, 1.00, 0.001), (0.90, 0.85, 0.95), "WARNING"),  # above the best method
        ((0.83, 0.72, 0.92, 0.001), (0.90, 0.85, 0.95), "WARNING"),  # the best method's AUROC within the blind CI
        ((0.70, 0.60, 0.80, 0.001), (0.95, 0.90, 0.99), "leaks somewhat"),
        # A CI above 0.5 is no leak without the test: p = 0.03 > 0.05 / 2 fails Holm's first step over two.
        ((0.83, 0.72, 0.92, 0.03), (0.90, 0.85, 0.95), "at chance"),
        # Both at chance, the baseline within the method's CI: no leak either.
        ((0.56, 0.45, 0.66, 0.2), (0.57, 0.46, 0.67, 0.2), "at chance"),
    ],
)
def test_the_verdict_says_in_plain_words_what_the_blind_baseline_means(blind, method, expected):
    results = {
        "loss": method_metrics(*method),
        "blind_bow": method_metrics(*blind),
        "blind_dates": method_metrics(0.5, 0.4, 0.6, 0.6),
    }
    verdict = model_free_verdict(results)
    assert expected in verdict.text and "blind_bow" in verdict.text and "loss" in verdict.text
    assert verdict.warning == (expected == "WARNING")
    assert (verdict.details["leaking"] == ["blind_bow"]) == (expected != "at chance")
    if expected == "at chance":
        assert f"a leak below AUROC {verdict.min_detectable_auroc:.2f} would likely go unseen (10 + 10 texts)" in (
            verdict.text
        )
    assert model_free_verdict({"loss": method_metrics(*method[:3])}) is None


def _results(n: int, blind_p: float) -> dict[str, metrics.MethodMetrics]:
    def column(auroc: float, p: float) -> metrics.MethodMetrics:
        return metrics.MethodMetrics(auroc, (auroc - 0.08, auroc + 0.08), {}, 1.0, n, n, 0, metrics.Significance(p))

    return {"loss": column(0.55, 0.2), "blind_bow": column(0.57, blind_p), "blind_dates": column(0.5, 0.5)}


@pytest.mark.parametrize("n, too_small", [(100, True), (2000, False)])
def test_a_known_leak_is_set_beside_blind_baselines_at_chance(n, too_small):
    known = KnownLeak("arxivmia", SUITES["arxivmia"].leakage)
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
    assert known_leak_verdict(model_free, KnownLeak("mimir", SUITES["mimir"].leakage)) is None
