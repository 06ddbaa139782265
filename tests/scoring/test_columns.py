"""The columns of a scores file (scoring.columns): id and label where the input has them, n_tokens, the scores, the
online detection's best window and warning, in that order; the windows file beside the scores; the rows of a block
as each producer fills them in."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mia_fast.data import Dataset
from mia_fast.methods import resolve_methods
from mia_fast.scoring.columns import ONLINE_COLUMNS, block_rows, output_columns, producers, windows_path
from mia_fast.scoring.detector import Scores


def test_the_output_columns_are_id_label_n_tokens_scores_online_and_warning():
    requests = resolve_methods(["loss", "mink"], [0.2])
    labelled = Dataset(texts=["a"], ids=["x"], labels=[1])
    columns = ["id", "label", "n_tokens", "loss", "mink_0.2", "warning"]
    assert output_columns(labelled, requests, "id", "label") == columns
    plain = Dataset(texts=["a"], ids=None, labels=None)
    assert output_columns(plain, requests, "key", "y", online=True) == [
        "n_tokens",
        "loss",
        "mink_0.2",
        *ONLINE_COLUMNS,
        "warning",
    ]


def test_the_windows_file_sits_beside_the_scores():
    assert windows_path("runs/scores.jsonl") == Path("runs/scores.windows.jsonl")
    assert windows_path(Path("s.parquet")) == Path("s.windows.jsonl")


def test_a_blocks_rows_are_each_producers_values_in_column_order():
    requests = resolve_methods(["loss"], [])
    data = Dataset(texts=["a", "b"], ids=["x", "y"], labels=[1, 0])
    scores = Scores({"loss": np.array([-1.5, np.nan])}, np.array([3, 0]), [None, "nothing to score"])
    made_by = producers(requests, "id", "label")
    rows = block_rows(made_by, data, scores)
    assert [list(row) for row in rows] == [["id", "label", "n_tokens", "loss", "warning"]] * 2
    assert rows[0] == {"id": "x", "label": 1, "n_tokens": 3, "loss": -1.5, "warning": None}
    assert rows[1]["warning"] == "nothing to score" and np.isnan(rows[1]["loss"])
