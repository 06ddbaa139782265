"""The report documents: metrics.json, report.md and report.html headed by the verdicts, the best k per family and
AUROC against k, the permutation column, n/a below the non-members' resolution, the text table, and metrics.json
read back; a report appears whole or not at all."""

import errno
import json
import math
import os

import numpy as np
import pytest
from helpers import run_cli, write_jsonl

from evaluation.test_experiments import corpus_texts
from mia_fast.errors import MiaFastError
from mia_fast.evaluation import metrics
from mia_fast.evaluation.columns import shown_columns
from mia_fast.evaluation.report import format_table, load_metrics, number_cell, write_report
from mia_fast.evaluation.verdicts import all_verdicts


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


def test_the_text_table_and_report_hold_the_permutation_column(tmp_path):
    labels = np.r_[np.ones(30), np.zeros(30)].astype(int)
    columns = {"loss": labels + np.random.default_rng(0).normal(size=60)}
    results = metrics.evaluate(labels, columns, resamples=20)
    assert "perm. p" in format_table(results).splitlines()[0]
    write_report(tmp_path, labels, columns, results, {})
    assert "| method | AUROC | 95% CI | perm. p |" in (tmp_path / "report.md").read_text()


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


def test_metrics_json_reads_back_with_undefined_metrics_as_nan(tmp_path):
    labels = np.r_[np.ones(5), np.zeros(5)].astype(int)
    columns = {"loss": labels + np.random.default_rng(1).normal(size=10)}
    results = metrics.evaluate(labels, columns, resamples=20)
    write_report(tmp_path, labels, columns, results, {"data": "hand-made"})
    loaded = load_metrics(tmp_path)
    assert loaded["meta"] == {"data": "hand-made"} and loaded["methods"]["loss"]["auroc"] == results["loss"].auroc
    assert math.isnan(loaded["methods"]["loss"]["tpr_at_fpr"]["1%"])  # 5 non-members cannot resolve 1% FPR
    (tmp_path / "metrics.json").write_text('{"meta": {}}')
    with pytest.raises(MiaFastError, match="not a mia-fast metrics file"):
        load_metrics(tmp_path)


def test_number_cells_align_and_say_na():
    assert number_cell(0.25, 7) == "  0.250" and number_cell(0.25, 7, "+") == " +0.250"
    assert number_cell(-0.1, 7, "+") == " -0.100" and number_cell(math.nan, 5) == "  n/a"


def test_a_report_that_cannot_be_written_whole_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    labels = np.r_[np.ones(5), np.zeros(5)].astype(int)
    columns = {"loss": labels + np.random.default_rng(1).normal(size=10)}
    results = metrics.evaluate(labels, columns, resamples=20)
    written = write_report(tmp_path, labels, columns, results, {"data": "first"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def full_disk(path, *args, **kwargs):
        path.write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("mia_fast.evaluation.report.plot_histograms", full_disk)
    with pytest.raises(MiaFastError, match=f"^cannot write {tmp_path / 'histograms.png'}: No space left on device;"):
        write_report(tmp_path, labels, columns, results, {"data": "second"})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
