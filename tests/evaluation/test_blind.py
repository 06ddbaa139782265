"""Model-free baselines: date features by hand, out-of-fold scores, the verdict in plain words (a leak only where
Holm's correction over the baselines finds one), and the reports that show them (best k per family, AUROC against
k)."""

import json

import numpy as np
import pytest
from helpers import FAST, fail, run_cli, write_jsonl

from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.blind import BLIND_COLUMNS, blind_scores, date_features
from mia_fast.evaluation.report import format_table, k_families, shown_columns, write_report
from mia_fast.evaluation.verdicts import all_verdicts, model_free_verdict

WORDS = (
    "river stone cloud lamp field market garden letter window bridge harbour summer winter engine paper music".split()
)


def random_texts(n: int, seed: int, words=WORDS, length: int = 12) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=length)) for _ in range(n)]


def test_date_features_by_hand():
    features = date_features(
        [
            "In 1999 and again in 2021, on March 3rd, the bridge opened.",
            "page 12345, pi is 3.1415 and 1,999 apples",
            "2024-05-01 and 5 May",
        ]
    )
    assert features[0] == pytest.approx([1, 0.21, -0.01, np.log1p(2), np.log1p(1)])
    assert features[1] == pytest.approx([0, 0, 0, 0, 0])  # not years: a longer number, a decimal, a thousands separator
    assert features[2] == pytest.approx([1, 0.24, 0.24, np.log1p(1), np.log1p(2)])


def test_a_leaky_split_is_separated_without_any_model_and_an_iid_split_is_not():
    members = [f"{t} in {1800 + i % 90}" for i, t in enumerate(random_texts(40, 0, WORDS[:8]))]
    nonmembers = [f"{t} in {2024 + i % 2}" for i, t in enumerate(random_texts(40, 1, WORDS[8:]))]
    labels = np.r_[np.ones(40), np.zeros(40)].astype(int)
    leaky = blind_scores(members + nonmembers, labels)
    assert all(metrics.auroc(labels, leaky[name]) > 0.95 for name in BLIND_COLUMNS)
    # Unique random texts with random labels: a classifier scored on texts it was trained on would
    # still reach AUROC near 1; out of fold, it stays near chance.
    texts = random_texts(80, 2, WORDS)
    shuffled = np.random.default_rng(3).permutation(labels)
    for scores in blind_scores(texts, shuffled).values():
        assert abs(metrics.auroc(shuffled, scores) - 0.5) < 0.2


def test_blind_scores_are_seeded():
    texts, labels = random_texts(30, 4), [0, 1] * 15
    first, second = blind_scores(texts, labels, seed=1), blind_scores(texts, labels, seed=1)
    assert all(np.array_equal(first[n], second[n]) for n in BLIND_COLUMNS)


def test_too_few_of_a_class_is_refused_clearly():
    with pytest.raises(MiaFastError, match="at least 2 members and 2 non-members"):
        blind_scores(random_texts(6, 5), [1, 0, 0, 0, 0, 0])
    with pytest.raises(MiaFastError, match="3 texts but 2 labels"):
        blind_scores(random_texts(3, 5), [1, 0])


def _metrics(auroc: float, low: float, high: float, p: float = 0.5, n: int = 10) -> metrics.MethodMetrics:
    return metrics.MethodMetrics(auroc, (low, high), {"1%": 0.0}, 1.0, n, n, 0, metrics.Significance(p))


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
    results = {"loss": _metrics(*method), "blind_bow": _metrics(*blind), "blind_dates": _metrics(0.5, 0.4, 0.6, 0.6)}
    verdict = model_free_verdict(results)
    assert expected in verdict.text and "blind_bow" in verdict.text and "loss" in verdict.text
    assert verdict.warning == (expected == "WARNING")
    assert (verdict.details["leaking"] == ["blind_bow"]) == (expected != "at chance")
    if expected == "at chance":
        assert f"a leak below AUROC {verdict.min_detectable_auroc:.2f} would likely go unseen (10 + 10 texts)" in (
            verdict.text
        )
    assert model_free_verdict({"loss": _metrics(*method[:3])}) is None


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
    results = {n: _metrics(a, a - 0.1, a + 0.05) for n, a in aurocs.items()}
    assert shown_columns(results) == ["minkpp_1.0", "mink_0.2", "loss", "blind_bow", "samia_zlib"]


def test_report_shows_the_verdict_the_best_k_and_auroc_against_k(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    columns = {f"mink_{k}": labels * k + rng.normal(size=60) for k in (0.1, 0.5, 1.0)}
    columns["loss"] = rng.normal(size=60)
    columns["blind_bow"] = labels * 3 + rng.normal(size=60)  # separable without the model
    results = metrics.evaluate(labels, columns, resamples=100)
    verdicts = all_verdicts(results, shown_columns(results))
    written = write_report(tmp_path, labels, columns, results, {"data": "synthetic"}, verdicts)
    assert [p.name for p in written] == [
        "metrics.json",
        "roc.png",
        "histograms.png",
        "auroc_by_k.png",
        "report.md",
        "report.html",
    ]
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("**WARNING") < markdown.index("## Detection quality") and "| blind_bow* |" in markdown
    assert (tmp_path / "report.html").read_text().count("class='warning'") == 1
    assert json.loads((tmp_path / "metrics.json").read_text())["model_free"]["columns"] == ["blind_bow"]
    table = format_table(results, verdicts)
    assert "blind_bow*" in table and table.splitlines()[-3].startswith("WARNING")
    assert table.splitlines()[-2].startswith("Methods above chance")  # mink_1.0 at its best k
    assert table.splitlines()[-1].startswith("No method is above chance and above the best model-free baseline")


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


@pytest.mark.parametrize("seed", range(4))
def test_the_date_classifier_is_scikit_learns_logistic_regression_solved_to_the_end(seed):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from mia_fast.evaluation.blind import _standardise, logistic_regression

    rng = np.random.default_rng(seed)
    x = np.c_[rng.normal(size=(40, 3)) * [1, 10, 0.1], np.full(40, 0.24), rng.integers(0, 2, 40)]
    y = (x[:, 0] + rng.normal(size=40) > 0).astype(float)
    if seed == 3:
        y = (x[:, 0] > 0).astype(float)  # separable: only the penalty bounds the weights
    train, held_out = np.arange(30), np.arange(30, 40)
    standardised = _standardise(x, train)
    weights = logistic_regression(standardised[train], y[train])
    ours = standardised[held_out] @ weights[:-1] + weights[-1]
    exact = make_pipeline(StandardScaler(), LogisticRegression(solver="newton-cg", tol=1e-13, max_iter=10_000))
    theirs = exact.fit(x[train], y[train]).decision_function(x[held_out])
    assert np.abs(ours - theirs).max() < 1e-8
    assert np.all(standardised[:, 3] == 0)  # a constant column is centred on its value exactly


def test_the_word_classifiers_tf_idf_is_scikit_learns():
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfTransformer

    from mia_fast.evaluation.blind import _tf_idf

    rng = np.random.default_rng(0)
    dense = rng.integers(1, 5, (12, 30)) * (rng.random((12, 30)) < 0.3)
    dense[4] = 0  # a text without a word
    counts = sparse.csr_matrix(dense.astype(np.float64))
    before = counts.copy()
    train = np.array([0, 2, 3, 4, 5, 7, 8, 11])
    theirs = TfidfTransformer(sublinear_tf=True).fit(counts[train]).transform(counts)
    assert abs(_tf_idf(counts, train) - theirs).max() < 1e-15
    assert (counts != before).nnz == 0  # the counts are left as they were
