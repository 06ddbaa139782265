"""Reading texts (.jsonl[.gz], .json[.gz], .csv, .parquet) and writing scores incrementally.

Results are appended in input order and flushed block by block, so an interrupted run loses at
most the block in flight; ``resume`` keeps every complete row already written and continues.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mia_fast.data.readers import BadRecord, decode_json_record, iter_lines, iter_parquet
from mia_fast.errors import MiaFastError

INPUT_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".csv", ".parquet")
OUTPUT_SUFFIXES = (".jsonl", ".csv", ".parquet")
# Label encodings seen in the field's datasets, mapped to 1 = member, 0 = non-member.
_LABEL_WORDS = {
    "0": 0, "1": 1, "0.0": 0, "1.0": 1, "true": 1, "false": 0,
    "member": 1, "nonmember": 0, "non-member": 0, "non_member": 0, "seen": 1, "unseen": 0,
}


@dataclass
class Dataset:
    texts: list[str]
    ids: list[Any] | None
    labels: list[int] | None
    groups: list[str] | None = None  # e.g. the book of each BookMIA snippet, for per-document rates
    neighbors: list[tuple[str, ...]] | None = None  # perturbed copies of each text, for the neighbour attack


def _suffix(path: Path, allowed: Sequence[str], what: str) -> str:
    name = path.name.lower()
    for suffix in sorted(allowed, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    raise MiaFastError(f"{path}: unsupported {what} format; use one of {', '.join(allowed)}")


def read_rows(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """(line or row number, record) for every record of a data file."""
    path = Path(path)
    suffix = _suffix(path, INPUT_SUFFIXES, "input")
    if not path.is_file():
        raise MiaFastError(f"{path}: no such file")
    try:
        if suffix == ".parquet":
            return [(number, record) for number, record, _ in iter_parquet(path)]
        if suffix.startswith(".jsonl"):
            return _read_jsonl(path)
        opener = gzip.open if suffix.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", newline="") as f:
            if suffix == ".csv":
                return list(enumerate(csv.DictReader(f), start=2))
            return _read_json(path, f)
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        raise MiaFastError(f"{path}: cannot read: {exc}") from None
    except Exception as exc:  # pyarrow and csv raise their own error types on corrupt files
        if isinstance(exc, MiaFastError):
            raise
        raise MiaFastError(f"{path}: cannot read: {exc}") from None


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    for line_number, line, _ in iter_lines(path):
        if not line.strip():
            continue
        try:
            rows.append((line_number, decode_json_record(line)))
        except BadRecord as bad:
            reason = f"malformed JSON: {bad.detail}" if bad.kind == "json" else str(bad)
            raise MiaFastError(f"{path}:{line_number}: {reason}") from None
    return rows


def _read_json(path: Path, f: io.TextIOBase) -> list[tuple[int, dict]]:
    try:
        document = json.load(f)
    except json.JSONDecodeError as exc:
        raise MiaFastError(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(document, list) or not all(isinstance(r, dict) for r in document):
        raise MiaFastError(f"{path}: expected a JSON array of objects")
    return list(enumerate(document, start=1))


def read_dataset(
    path: str | os.PathLike,
    text_field: str = "text",
    id_field: str | None = "id",
    label_field: str | None = "label",
    require_labels: bool = False,
    group_field: str | None = None,
    neighbor_field: str | None = None,
) -> Dataset:
    """Reads texts, plus ids, labels and groups where the file has those fields, and with
    ``neighbor_field`` each row's list of neighbour texts."""
    rows = read_rows(path)
    if not rows:
        raise MiaFastError(f"{path}: the file holds no rows")
    texts = []
    for number, record in rows:
        if text_field not in record:
            present = ", ".join(map(str, record)) or "none"
            raise MiaFastError(f"{path}: row at line {number} has no {text_field!r} field (fields: {present}); pick one with --text-field")
        text = record[text_field]
        if text is None:
            text = ""
        if not isinstance(text, str):
            raise MiaFastError(f"{path}: row at line {number}: {text_field!r} is a {type(text).__name__}, not a string")
        texts.append(text)
    ids = _column(rows, id_field)
    labels = _column(rows, label_field)
    if labels is not None:
        labels = [_row_label(path, number, value) for (number, _), value in zip(rows, labels)]
    elif require_labels:
        raise MiaFastError(f"{path}: no {label_field!r} field; evaluation needs 0/1 labels (pick the field with --label-field)")
    groups = _column(rows, group_field)
    if group_field and groups is None:
        raise MiaFastError(f"{path}: no {group_field!r} field for --group-field")
    neighbors = [_neighbor_list(path, number, record, neighbor_field) for number, record in rows] if neighbor_field else None
    return Dataset(texts=texts, ids=ids, labels=labels, groups=None if groups is None else [str(g) for g in groups], neighbors=neighbors)


def _neighbor_list(path: str | os.PathLike, number: int, record: dict, field: str) -> tuple[str, ...]:
    value = record.get(field)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        found = "missing" if field not in record else f"a {type(value).__name__}" if not isinstance(value, (list, tuple)) else "a list holding non-texts"
        raise MiaFastError(f"{path}: row at line {number}: {field!r} is {found}, not a list of texts (--neighbor-field)")
    return tuple(value)


def read_texts(path: str | os.PathLike, text_field: str = "text") -> list[str]:
    """The texts of a file: a ``.txt`` holds one per line (blank lines skipped), any input format its text field."""
    path = Path(path)
    if path.name.lower().endswith(".txt"):
        try:
            texts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise MiaFastError(f"{path}: cannot read: {exc}") from None
    else:
        texts = [t for t in read_dataset(path, text_field, id_field=None, label_field=None).texts if t.strip()]
    if not texts:
        raise MiaFastError(f"{path}: holds no texts")
    return texts


def read_scores(path: str | os.PathLike, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Score columns of a scores file as float64 arrays (NaN where a text could not be scored)."""
    records = [record for _, record in read_rows(path)]
    return {c: np.array([np.nan if r[c] in (None, "") else float(r[c]) for r in records]) for c in columns}


def _column(rows: list[tuple[int, dict]], field: str | None) -> list[Any] | None:
    if not field or not any(field in record for _, record in rows):
        return None
    missing = next((number for number, record in rows if field not in record), None)
    if missing is not None:
        raise MiaFastError(f"row at line {missing} has no {field!r} field while other rows do")
    return [record[field] for _, record in rows]


def parse_label(value: Any) -> int:
    """1 (member) or 0 (non-member) from 0/1, booleans, or words such as "member" and "nonmember"."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _LABEL_WORDS:
        return _LABEL_WORDS[value.strip().lower()]
    raise MiaFastError(f"label {value!r} is neither member (1, true, \"member\") nor non-member (0, false, \"nonmember\")")


def _row_label(path: Path, number: int, value: Any) -> int:
    try:
        return parse_label(value)
    except MiaFastError as exc:
        raise MiaFastError(f"{path}: row at line {number}: {exc}") from None


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class ResultWriter:
    """Appends result rows to .jsonl / .csv (or .parquet, staged as .jsonl and converted at the end).

    Opening checks that the path is writable. An existing output is refused unless ``resume``
    (keep its complete rows and continue) or ``overwrite`` is given.
    """

    def __init__(self, path: str | os.PathLike, columns: Sequence[str], resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        self.format = _suffix(self.path, OUTPUT_SUFFIXES, "output").lstrip(".")
        self.columns = list(columns)
        self.stage = self.path.with_name(self.path.name + ".partial.jsonl") if self.format == "parquet" else self.path
        self.done_rows = 0
        self.complete = False
        if resume and overwrite:
            raise MiaFastError("--resume and --overwrite exclude each other")
        exists = self.path.exists() or self.stage.exists()
        if exists and not (resume or overwrite):
            raise MiaFastError(f"{self.path} exists; pass --resume to continue it or --overwrite to replace it")
        if self.format == "parquet" and resume and self.path.exists() and not self.stage.exists():
            self.done_rows, self.complete = self._parquet_rows(), True
        elif resume and self.stage.exists():
            self.done_rows = self._recover()
        else:
            self._create()

    def _create(self) -> None:
        try:
            self.stage.parent.mkdir(parents=True, exist_ok=True)
            with open(self.stage, "w", encoding="utf-8", newline="") as f:
                if self.format == "csv":
                    csv.writer(f).writerow(self.columns)
        except OSError as exc:
            raise MiaFastError(f"cannot write {self.stage}: {exc.strerror or exc}") from None
        if self.format == "parquet" and self.path.exists():
            self.path.unlink()

    def _recover(self) -> int:
        """Keeps the complete rows of an interrupted output, cuts a torn last line, returns their count."""
        raw = self.stage.read_bytes()
        keep = raw[: raw.rfind(b"\n") + 1]
        text = keep.decode("utf-8", errors="strict")
        if self.format == "csv":
            rows = list(csv.reader(io.StringIO(text, newline="")))
            if not rows or rows[0] != self.columns:
                found = rows[0] if rows else []
                raise MiaFastError(f"{self.stage} has columns {found}, not {self.columns}; cannot resume with other methods or fields")
            count = len(rows) - 1
        else:
            count = 0
            for line_number, line in enumerate(text.splitlines(), start=1):
                try:
                    keys = list(json.loads(line))
                except json.JSONDecodeError:
                    raise MiaFastError(f"{self.stage}:{line_number}: not a result row; cannot resume") from None
                if keys != self.columns:
                    raise MiaFastError(f"{self.stage} has columns {keys}, not {self.columns}; cannot resume with other methods or fields")
                count += 1
        if len(keep) != len(raw):
            with open(self.stage, "r+b") as f:
                f.truncate(len(keep))
        return count

    def _parquet_rows(self) -> int:
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.path).metadata.num_rows

    def written_column(self, name: str) -> list[Any]:
        """A column of the rows written so far (to check that a resumed output matches the input)."""
        if self.complete:
            import pyarrow.parquet as pq

            return pq.read_table(self.path, columns=[name]).column(name).to_pylist()
        with open(self.stage, encoding="utf-8", newline="") as f:
            if self.format == "csv":
                return [row[name] for row in csv.DictReader(f)]
            return [json.loads(line)[name] for line in f if line.strip()]

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        with open(self.stage, "a", encoding="utf-8", newline="") as f:
            if self.format == "csv":
                writer = csv.writer(f)
                for row in rows:
                    writer.writerow(["" if _json_value(row[c]) is None else row[c] for c in self.columns])
            else:
                for row in rows:
                    f.write(json.dumps({c: _json_value(row[c]) for c in self.columns}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done_rows += len(rows)

    def close(self) -> None:
        """Finishes the output; for parquet, converts the staged rows and removes the stage."""
        if self.format != "parquet" or self.complete:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        with open(self.stage, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
        table = pa.Table.from_pylist(records) if records else pa.table({c: [] for c in self.columns})
        staging = self.path.with_name(self.path.name + ".tmp")
        pq.write_table(table, staging)
        os.replace(staging, self.path)
        self.stage.unlink()
        self.complete = True
