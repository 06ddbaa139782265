"""The columns of a scores file, each group from a producer: the input's fields (id, label), n_tokens, the methods'
scores, the online detection's best window (which also writes every window to a file beside the scores) and the
warning. A file runner asks each producer, in that order, for its columns and then, block by block, for its values."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mia_fast.data.files import Dataset
from mia_fast.methods.online import OnlineSetting, window_record
from mia_fast.methods.registry import MethodRequest

if TYPE_CHECKING:  # annotations only: the detector's module imports torch, which `mia-fast --help` must not
    from mia_fast.scoring.detector import Scores

ONLINE_COLUMNS = ("online_max", "online_start", "online_end", "online_text")


def windows_path(out: str | os.PathLike) -> Path:
    """Where ``score_file`` writes every online window's score beside ``out``: ``<out stem>.windows.jsonl``."""
    return Path(out).with_suffix(".windows.jsonl")


class ColumnProducer:
    """A group of columns of a scores file: named from the first block of the input, filled in row by row; and the
    files it writes beside the scores (none by default), with their columns and rows."""

    def columns(self, first: Dataset) -> list[str]:
        raise NotImplementedError

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        """Puts its values for row ``j`` of ``data`` (scored as ``scores``) into ``row``."""
        raise NotImplementedError

    def beside(self, first: Dataset) -> dict[Path, list[str]]:
        """The files it writes beside the scores, and their columns."""
        return {}

    def beside_rows(self, first_row: int, data: Dataset, scores: Scores) -> dict[Path, list[dict[str, Any]]]:
        """The rows of each file beside the scores for the block ``data``, row ``first_row`` of the input on."""
        return {}


class InputFields(ColumnProducer):
    """The input's id and label, under the names the input has them (where it has them)."""

    def __init__(self, id_field: str, label_field: str) -> None:
        self.id_field, self.label_field = id_field, label_field

    def columns(self, first: Dataset) -> list[str]:
        return [
            *([self.id_field] if first.ids is not None else []),
            *([self.label_field] if first.labels is not None else []),
        ]

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        if data.ids is not None:
            row[self.id_field] = data.ids[j]
        if data.labels is not None:
            row[self.label_field] = data.labels[j]


class TokenCounts(ColumnProducer):
    """``n_tokens``: the scored positions of each text."""

    def columns(self, first: Dataset) -> list[str]:
        return ["n_tokens"]

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        row["n_tokens"] = int(scores.n_tokens[j])


class MethodScores(ColumnProducer):
    """Every score column of the requested methods."""

    def __init__(self, requests: Sequence[MethodRequest]) -> None:
        self.names = [c for r in requests for c in r.columns]

    def columns(self, first: Dataset) -> list[str]:
        return list(self.names)

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        row.update({name: float(values[j]) for name, values in scores.items()})


class OnlineWindows(ColumnProducer):
    """Online detection: each row's best window (``ONLINE_COLUMNS``), and every window of each text in the windows
    file beside the scores (``windows_path``), one row per text."""

    def __init__(self, setting: OnlineSetting, id_field: str, out: str | os.PathLike) -> None:
        self.setting, self.id_field, self.path = setting, id_field, windows_path(out)

    def columns(self, first: Dataset) -> list[str]:
        return list(ONLINE_COLUMNS)

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        windows = scores.online.windows[j]
        start, end = windows.best_span
        spanned = start >= 0
        row.update(
            online_max=windows.max_score,
            online_start=start if spanned else None,
            online_end=end if spanned else None,
            online_text=scores.online.span_text[j],
        )

    def beside(self, first: Dataset) -> dict[Path, list[str]]:
        fields = [self.id_field] if first.ids is not None else []
        return {self.path: ["row", *fields, "method", "window", "stride", "starts", "ends", "scores"]}

    def beside_rows(self, first_row: int, data: Dataset, scores: Scores) -> dict[Path, list[dict[str, Any]]]:
        rows = [
            {
                "row": first_row + j,
                **({self.id_field: data.ids[j]} if data.ids is not None else {}),
                **window_record(windows, scores.online.setting),
            }
            for j, windows in enumerate(scores.online.windows)
        ]
        return {self.path: rows}


class Warnings(ColumnProducer):
    """``warning``: why a text could not be scored, or nothing."""

    def columns(self, first: Dataset) -> list[str]:
        return ["warning"]

    def fill(self, row: dict[str, Any], data: Dataset, j: int, scores: Scores) -> None:
        row["warning"] = scores.warnings[j]


def producers(
    requests: Sequence[MethodRequest], id_field: str, label_field: str, online: Sequence[OnlineWindows] = ()
) -> tuple[ColumnProducer, ...]:
    """The producers of a scores file's columns, in their order: id and label, n_tokens, the scores, ``online``'s
    best windows, warning."""
    return (InputFields(id_field, label_field), TokenCounts(), MethodScores(requests), *online, Warnings())


def output_columns(
    dataset: Dataset, requests: Sequence[MethodRequest], id_field: str, label_field: str, *, online: bool = False
) -> list[str]:
    """The columns of a scores file: the input's id and label (where it has them), n_tokens, every score, the
    online detection's best window (with ``online``), warning."""
    columns = [c for p in producers(requests, id_field, label_field) for c in p.columns(dataset)]
    return [*columns[:-1], *(ONLINE_COLUMNS if online else ()), columns[-1]]


def block_rows(made_by: Sequence[ColumnProducer], data: Dataset, scores: Scores) -> list[dict[str, Any]]:
    """The scores file's rows of the block ``data``: each producer's values, in order."""
    rows = []
    for j in range(len(data.texts)):
        row: dict[str, Any] = {}
        for producer in made_by:
            producer.fill(row, data, j, scores)
        rows.append(row)
    return rows


def beside_rows(
    made_by: Sequence[ColumnProducer], first_row: int, data: Dataset, scores: Scores
) -> Mapping[Path, list[dict[str, Any]]]:
    """The rows of every file beside the scores for the block ``data``."""
    return {path: rows for p in made_by for path, rows in p.beside_rows(first_row, data, scores).items()}
