"""A benchmark suite is added from this file alone: one ``Suite`` in ``SUITES``, its layout and its leakage. ``--suite``
then accepts it and lists it in ``--help``, its local files load in its layout (text field, labels, groups), and
``mia-fast eval`` reports on it with its leakage on record. No other file of the project knows of it
(docs/adding-a-suite.md walks through the same steps)."""

from __future__ import annotations

import json

import pytest

from mia_fast.cli import main
from mia_fast.data import SUITES, load_suite
from mia_fast.data.suites import Leakage, Suite, SuiteRows

TOY = Suite(
    "toy-suite",
    None,
    ("short", "long"),
    SuiteRows("passage", group_field="source"),
    leakage=Leakage("i.i.d.", "not measured; drawn at random from one corpus"),
    about="passages of a toy corpus; the `source` is the group",
)


@pytest.fixture
def registered():
    SUITES[TOY.name] = TOY
    yield
    del SUITES[TOY.name]


@pytest.fixture
def files(tmp_path):
    rows = [
        {"passage": f"passage {i}: " + "the rain in spain stays mainly in the plain " * (1 + i % 3), "label": i % 2}
        | {"source": f"book {i % 3}"}
        for i in range(12)
    ]
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "long.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def test_it_is_listed_in_the_help(registered, capsys):
    assert main(["eval", "--help"]) == 0
    assert "toy-suite" in capsys.readouterr().out


def test_its_local_files_load_in_its_layout(registered, files):
    dataset = load_suite("toy-suite", "long", files=files)
    assert len(dataset.texts) == 12 and dataset.texts[0].startswith("passage 0: ")
    assert dataset.labels == [i % 2 for i in range(12)] and dataset.groups[:3] == ["book 0", "book 1", "book 2"]


def test_a_split_without_its_file_is_one_line(registered, files, capsys):
    assert main(["eval", str(files), "--suite", "toy-suite", "--split", "short", "--report", "r"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"mia-fast: error: {files}: expected one file named short.<jsonl|json|csv|parquet>, found 0"
    )


def test_eval_reports_on_it(registered, files, tiny_model_dir, tmp_path, capsys):
    report = tmp_path / "report"
    args = ["eval", str(files), "--suite", "toy-suite", "--split", "long", "--model", str(tiny_model_dir)]
    assert main([*args, "--methods", "loss,zlib", "--report", str(report), "--bootstrap", "20", "--no-blind"]) == 0
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["meta"]["data"] == f"toy-suite:long ({files})"
    assert "drawn at random from one corpus" in (report / "report.md").read_text()
