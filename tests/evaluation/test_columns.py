"""The columns a report shows: ranked by AUROC, each k-method family at its best k, a model-free baseline marked."""

from mia_fast.evaluation import metrics
from mia_fast.evaluation.columns import MODEL_FREE, display_name, k_families, ranked, shown_columns


def method_metrics(auroc: float, low: float, high: float, p: float = 0.5, n: int = 10) -> metrics.MethodMetrics:
    return metrics.MethodMetrics(auroc, (low, high), {"1%": 0.0}, 1.0, n, n, 0, metrics.Significance(p))


def test_k_families_and_the_columns_shown():
    names = ["loss", "mink_0.1", "mink_0.2", "minkpp_0.2", "minkpp_1.0", "samia_zlib", "blind_bow"]
    assert k_families(names) == {
        "mink": [(0.1, "mink_0.1"), (0.2, "mink_0.2")],
        "minkpp": [(0.2, "minkpp_0.2"), (1.0, "minkpp_1.0")],
    }
    aurocs = {
        "loss": 0.7,
        "mink_0.1": 0.6,
        "mink_0.2": 0.8,
        "minkpp_0.2": 0.75,
        "minkpp_1.0": 0.9,
        "samia_zlib": 0.5,
        "blind_bow": 0.55,
    }
    results = {n: method_metrics(a, a - 0.1, a + 0.05) for n, a in aurocs.items()}
    assert shown_columns(results) == ["minkpp_1.0", "mink_0.2", "loss", "blind_bow", "samia_zlib"]


def test_ranked_best_auroc_first_and_the_model_free_mark():
    results = {
        "a": method_metrics(0.6, 0.5, 0.7),
        "b": method_metrics(0.9, 0.8, 1.0),
        "c": method_metrics(0.7, 0.6, 0.8),
    }
    assert [name for name, _ in ranked(results)] == ["b", "c", "a"]
    assert display_name("blind_dates") == "blind_dates" + MODEL_FREE == "blind_dates*"
    assert display_name("loss") == "loss" and display_name("mink_0.2") == "mink_0.2"
    assert k_families(["mink_0.2", "mink_2", "mink_x.5", "zlib"]) == {"mink": [(0.2, "mink_0.2")]}
