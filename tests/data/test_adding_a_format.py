"""An output format is added from this file alone: one class and one registry line. ``--out s.tsv`` is then accepted
and listed in ``mia-fast score --help``, its rows are staged, resumed and made complete with a manifest as every
format's are, and the scores file reads back for ``mia-fast eval``. No other file of the project knows of it
(docs/adding-an-output-format.md walks through the same steps)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mia_fast.cli import main
from mia_fast.data.files import read_scores
from mia_fast.data.formats import OUTPUT_FORMATS, OutputFormat, json_value, register_format
from mia_fast.data.outputs import manifest_path, stage_path
from mia_fast.data.readers import RowPosition
from mia_fast.evaluation.metrics import auroc

FAST = ["--methods", "loss,zlib,mink", "--k", "0.2,1.0", "--block-rows", "4", "--quiet"]


class TabSeparated(OutputFormat):
    """Tab-separated values: a header line, then a line per row; NaN and None are empty."""

    suffix = ".tsv"

    def header(self, columns: Sequence[str]) -> bytes:
        return ("\t".join(columns) + "\n").encode("utf-8")

    def encode(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> bytes:
        def cell(value: Any) -> str:
            return "" if json_value(value) is None else str(value)

        return "".join("\t".join(cell(row[c]) for c in columns) + "\n" for row in rows).encode("utf-8")

    def read_back(self, path: Path, start: RowPosition) -> Iterator[tuple[int, dict[str, Any], int]]:
        with open(path, "rb") as f:
            columns = f.readline().decode("utf-8").rstrip("\n").split("\t")
            for number, line in enumerate(f, start=2):
                if number - 2 >= start.row:
                    yield number, dict(zip(columns, line.decode("utf-8").rstrip("\n").split("\t"))), f.tell()


@pytest.fixture
def registered():
    register_format(TabSeparated())
    yield
    del OUTPUT_FORMATS[".tsv"]


def score(data: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return ["score", str(data), "--model", str(model), "--out", str(out), *FAST, *extra]


def test_its_suffix_appears_in_the_help(registered, capsys):
    assert main(["score", "--help"]) == 0
    assert "--out OUT scores: .jsonl, .csv, .parquet or .tsv" in " ".join(capsys.readouterr().out.split())


def test_its_rows_are_written_with_the_header_and_a_manifest(registered, tiny_model_dir, labelled_jsonl, tmp_path):
    out = tmp_path / "s.tsv"
    assert main(score(labelled_jsonl, tiny_model_dir, out)) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    manifest = json.loads(manifest_path(out).read_text())
    assert lines[0].split("\t") == manifest["columns"] and {"id", "loss", "mink_0.2", "warning"} <= set(
        manifest["columns"]
    )
    assert len(lines) == 1 + 24 and manifest["complete"] and len(manifest["blocks"]) == 6
    assert not stage_path(out).exists()
    reference = tmp_path / "s.jsonl"
    assert main(score(labelled_jsonl, tiny_model_dir, reference)) == 0
    columns = ["loss", "zlib", "mink_0.2", "mink_1.0"]
    read, expected = read_scores(out, columns), read_scores(reference, columns)
    for column in columns:
        np.testing.assert_array_equal(read[column], expected[column])


def test_an_interrupted_run_resumes_from_its_stage(registered, tiny_model_dir, labelled_jsonl, tmp_path, monkeypatch):
    out = tmp_path / "s.tsv"
    encode, blocks = TabSeparated.encode, [0]

    def disk_full_at_the_third_block(self, rows, columns):
        blocks[0] += 1
        if blocks[0] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return encode(self, rows, columns)

    with monkeypatch.context() as patched:
        patched.setattr(TabSeparated, "encode", disk_full_at_the_third_block)
        assert main(score(labelled_jsonl, tiny_model_dir, out)) == 2
    assert not out.exists()
    assert sorted(p.name for p in stage_path(out).iterdir()) == ["manifest.json", "rows.tsv"]
    assert len((stage_path(out) / "rows.tsv").read_text().splitlines()) == 1 + 8
    assert main(score(labelled_jsonl, tiny_model_dir, out, "--resume")) == 0
    fresh = tmp_path / "fresh.tsv"
    assert main(score(labelled_jsonl, tiny_model_dir, fresh)) == 0
    assert out.read_bytes() == fresh.read_bytes() and not stage_path(out).exists()


def test_eval_reads_its_scores_back(registered, tiny_model_dir, labelled_jsonl, tmp_path):
    out, report = tmp_path / "s.tsv", tmp_path / "report"
    args = ["eval", str(labelled_jsonl), "--model", str(tiny_model_dir), "--out", str(out), "--report", str(report)]
    assert main([*args, *FAST, "--bootstrap", "20", "--no-blind"]) == 0
    methods = json.loads((report / "metrics.json").read_text())["methods"]
    labels = np.array([json.loads(line)["label"] for line in labelled_jsonl.read_text().splitlines()])
    for column, scores in read_scores(out, ["loss", "mink_0.2"]).items():
        assert methods[column]["n_members"] + methods[column]["n_nonmembers"] == 24
        assert methods[column]["auroc"] == pytest.approx(auroc(labels, scores))
