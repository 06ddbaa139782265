"""The report's figures drawn to PNG files on the Agg backend: the ROC curves (each k-method family at its best k),
the score histograms (a constant column too) and AUROC against k (only families of more than one k); each figure
freed once written."""

import matplotlib
import numpy as np

from mia_fast.evaluation import metrics
from mia_fast.evaluation.figures import plot_auroc_by_k, plot_histograms, plot_roc, pyplot, save_figure

PNG = b"\x89PNG\r\n\x1a\n"


def scored(seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = np.r_[np.ones(20), np.zeros(20)].astype(int)
    columns = {f"mink_{k}": labels * k + rng.normal(size=40) for k in (0.1, 0.5)}
    columns["loss"] = rng.normal(size=40)
    columns["loss"][3] = np.nan  # a row left out
    columns["blind_bow"] = np.ones(40)  # constant: one bin, no spread
    columns["zlib_0.5"] = labels + rng.normal(size=40)  # a family of one k: no AUROC-by-k panel
    return labels, columns, metrics.evaluate(labels, columns, resamples=20)


def test_every_figure_is_a_png_and_is_freed(tmp_path):
    labels, columns, results = scored()
    plt = pyplot()
    assert matplotlib.get_backend().lower() == "agg"
    written = [
        plot_roc(tmp_path / "roc.png", labels, columns, results),
        plot_histograms(tmp_path / "histograms.png", labels, columns, results),
        plot_auroc_by_k(tmp_path / "by_k.png", results),
    ]
    assert [p.name for p in written] == ["roc.png", "histograms.png", "by_k.png"]
    assert all(p.read_bytes().startswith(PNG) for p in written)
    assert plt.get_fignums() == []


def test_the_auroc_by_k_figure_has_a_panel_per_family_of_several_k(tmp_path, monkeypatch):
    labels, columns, results = scored(1)
    drawn = []
    monkeypatch.setattr("mia_fast.evaluation.figures.save_figure", lambda fig, path: drawn.append(fig) or path)
    plot_auroc_by_k(tmp_path / "by_k.png", results)
    titles = [ax.get_title() for ax in drawn[0].axes]
    assert titles == ["mink"]  # zlib_0.5 alone is no family to draw against k
    pyplot().close(drawn[0])


def test_save_figure_writes_at_the_resolution_asked(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    path = save_figure(fig, tmp_path / "line.png", dpi=50)
    width, height = int.from_bytes(path.read_bytes()[16:20], "big"), int.from_bytes(path.read_bytes()[20:24], "big")
    assert (width, height) == (100, 50) and plt.get_fignums() == []
