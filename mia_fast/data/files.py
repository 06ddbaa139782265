"""A data file of texts (.jsonl[.gz], .json[.gz], .csv, .parquet, or any output format registered in ``formats``) as
a :class:`Dataset` in memory or a :class:`DataStream` read block by block, its rows checked before scoring; the
records of any such file from a row position on, and score columns read back."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
import sys
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.fields import Fields, column, neighbor_list, refuse_repeated_fields, row_label, row_text
from mia_fast.data.formats import JSONL, OUTPUT_FORMATS, ColumnKinds, OutputFormat, matching_suffix
from mia_fast.data.readers import Records, RowPosition, file_kind, json_array_records
from mia_fast.data.text import truncate_words
from mia_fast.errors import MiaFastError, MiaFastWarning

# A JSON array of objects, read whole: an input only, listed with JSON lines.
JSON_ARRAY_SUFFIXES = (".json", ".json.gz")
# Rows held at a time while a stream is checked before scoring.
_CHECK_ROWS = 4096


@dataclass
class Dataset:
    texts: list[str]
    ids: list[Any] | None
    labels: list[int] | None
    groups: list[str] | None = None  # e.g. the book of each BookMIA snippet, for per-document rates
    neighbors: list[tuple[str, ...]] | None = None  # perturbed copies of each text, for the neighbour attack
    source: Path | None = None  # the file the rows were read from

    def fingerprints(self) -> list[bytes]:
        """A digest of each row as it is scored (text, id, label, neighbours): a resumed output checks that the rows
        it holds were scored from these."""

        def column(values):
            return values if values is not None else [None] * len(self.texts)

        return [
            hashlib.sha256(json.dumps(list(row), ensure_ascii=False, default=str).encode("utf-8")).digest()
            for row in zip(self.texts, column(self.ids), column(self.labels), column(self.neighbors))
        ]

    @property
    def size(self) -> int:
        """Characters of text, the measure of progress through a dataset in memory (a DataStream counts bytes)."""
        return sum(map(len, self.texts))

    def rows(self, start: int, stop: int) -> Dataset:
        """Rows [start, stop) as a Dataset of their own."""

        def cut(values):
            return None if values is None else values[start:stop]

        return Dataset(
            cut(self.texts), cut(self.ids), cut(self.labels), cut(self.groups), cut(self.neighbors), self.source
        )

    def blocks(self, rows: int) -> Iterator[tuple[Dataset, int]]:
        """Consecutive Datasets of ``rows`` rows (the last one shorter), each with the characters of text up to its
        end."""
        if not self.texts:
            raise MiaFastError("the dataset holds no rows")
        done = 0
        for start in range(0, len(self.texts), rows):
            block = self.rows(start, start + rows)
            done += block.size
            yield block, done


def input_suffixes() -> tuple[str, ...]:
    """What a data file may end with: what each output format reads, and a JSON array's suffixes."""
    suffixes: list[str] = []
    for fmt in OUTPUT_FORMATS.values():
        suffixes += fmt.read_suffixes
        if fmt is JSONL:
            suffixes += JSON_ARRAY_SUFFIXES
    return tuple(suffixes)


def _input_path(path: str | os.PathLike) -> tuple[Path, str]:
    path = Path(path)
    suffix = matching_suffix(path, input_suffixes(), "input")
    try:
        mode = path.stat().st_mode  # stat, not open: opening a FIFO with no writer would wait for one
    except FileNotFoundError:
        raise MiaFastError(f"{path}: no such file") from None
    except OSError as exc:
        raise MiaFastError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISFIFO(mode):
        raise MiaFastError(
            f"{path} is a named pipe (FIFO): mia-fast reads its input more than once (a check of every row, then "
            "the scoring); write it to a file first"
        )
    if not stat.S_ISREG(mode):
        raise MiaFastError(f"{path} is {file_kind(mode)}, not a file of texts")
    return path, suffix


def iter_rows(path: str | os.PathLike, start: RowPosition | None = None) -> Records:
    """(line or row number, record, bytes of the file read so far) of every record of a data file from ``start``
    on, read lazily: one line, or one parquet row group, in memory at a time (a .json array is read whole)."""
    path, suffix = _input_path(path)
    return _guarded(path, _records(path, suffix, start or RowPosition(0, 0)))


def _guarded(path: Path, records: Iterator) -> Iterator:
    try:
        yield from records
    except MiaFastError:
        raise
    except (UnicodeDecodeError, OSError, EOFError, zlib.error) as exc:
        raise MiaFastError(f"{path}: cannot read: {exc}") from None
    except Exception as exc:  # pyarrow and csv raise their own error types on corrupt files
        raise MiaFastError(f"{path}: cannot read: {exc}") from None


def _reading_format(suffix: str) -> OutputFormat | None:
    """The format that reads files of ``suffix``; None for a JSON array, an input only."""
    return next((fmt for fmt in OUTPUT_FORMATS.values() if suffix in fmt.read_suffixes), None)


def _records(path: Path, suffix: str, start: RowPosition) -> Records:
    fmt = _reading_format(suffix)
    yield from json_array_records(path, start) if fmt is None else fmt.read_back(path, start)


def row_positions(path: str | os.PathLike, every: int) -> tuple[list[RowPosition], int]:
    """The positions of rows 0, every, 2·every, … of a data file, and its number of rows, from one streaming
    read. Where the file's format says where its rows start (``OutputFormat.row_starts``: plain .jsonl and .csv),
    the positions carry byte offsets, so a reader can start there without reading what comes before; elsewhere
    they are row numbers."""
    if every < 1:
        raise MiaFastError(f"rows per shard must be positive, got {every}")
    path, suffix = _input_path(path)
    fmt = _reading_format(suffix)
    starts = fmt.row_starts(path) if fmt is not None else None
    if starts is None:
        starts = (RowPosition(row, number) for row, (number, _, _) in enumerate(iter_rows(path)))
    positions, rows = [], 0
    for position in _guarded(path, starts):
        if position.row % every == 0:
            positions.append(position)
        rows += 1
    return positions, rows


def read_rows(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """(line or row number, record) for every record of a data file."""
    return [(number, record) for number, record, _ in iter_rows(path)]


class DataStream:
    """The rows of a data file as consecutive Datasets of a few rows each, read lazily, so memory holds one
    block whatever the file's size. ``fields`` names the fields read; with ``require_labels`` a file without the
    label field is refused. Texts are cut to ``max_words`` words. :meth:`part` reads only some rows from a position
    (see :func:`row_positions`).

    Whether the file has ids, labels and groups is decided by its first block; a later row that breaks
    that rule stops the read with its line number.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        fields: Fields = Fields(),  # noqa: B008  (a frozen dataclass)
        *,
        require_labels: bool = False,
        max_words: int | None = None,
    ) -> None:
        self.path, _ = _input_path(path)
        if max_words is not None and max_words < 1:
            raise MiaFastError(f"--max-words must be positive, got {max_words}")
        self.fields = fields
        self.require_labels = require_labels
        self.max_words = max_words
        self.start = RowPosition(0, 0)
        self.limit: int | None = None

    def part(self, start: RowPosition, limit: int) -> DataStream:
        """The same stream of ``limit`` rows from ``start`` on (a shard of the file)."""
        part = copy.copy(self)
        part.start, part.limit = start, limit
        return part

    @property
    def size(self) -> int:
        """Bytes of the file, for progress against the bytes read."""
        return self.path.stat().st_size

    def check(self, ids: ColumnKinds | None = None) -> int:
        """Reads every row once, as :meth:`blocks` will, so that a bad row is refused before anything is scored or
        written, and doubtful rows (repeated ids, texts labelled both ways) are warned of; returns the row count.
        ``ids`` is told every id, for the type of a scores file's id column."""
        repeats = _Repeats(ids)
        rows = sum(len(block.texts) for block, _ in self._blocks(_CHECK_ROWS, repeats))
        repeats.warn(self.path)
        return rows

    def whole(self) -> Dataset:
        """Every row (from :attr:`start`, up to :attr:`limit`) as one Dataset, doubtful rows warned of as by
        :meth:`check` (the warnings point at the caller of :func:`read_dataset`, which reads through here)."""
        repeats = _Repeats()
        dataset = next(self._blocks(sys.maxsize, repeats))[0]
        repeats.warn(self.path, stacklevel=4)
        return dataset

    def blocks(self, rows: int) -> Iterator[tuple[Dataset, int]]:
        """Consecutive Datasets of ``rows`` rows (the last one shorter), each with the bytes of the file read by its
        end."""
        return self._blocks(rows)

    def _blocks(self, rows: int, repeats: _Repeats | None = None) -> Iterator[tuple[Dataset, int]]:
        present: dict[str, bool] = {}
        chunk: list[tuple[int, dict]] = []
        read = 0
        for number, record, position in iter_rows(self.path, self.start):
            chunk.append((number, record))
            read += 1
            if len(chunk) == rows or read == self.limit:
                yield self._dataset(chunk, present, repeats), position
                chunk = []
            if read == self.limit:
                return
        if chunk:
            yield self._dataset(chunk, present, repeats), self.size
        elif not read:
            raise MiaFastError(f"{self.path}: the file holds no rows")

    def _dataset(self, rows: list[tuple[int, dict]], present: dict[str, bool], repeats: _Repeats | None) -> Dataset:
        path, fields = self.path, self.fields
        refuse_repeated_fields(path, rows, (fields.text, fields.id, fields.label, fields.group, fields.neighbors))
        texts = [row_text(path, number, record, fields.text) for number, record in rows]
        ids, labels, groups = (column(path, rows, field, present) for field in (fields.id, fields.label, fields.group))
        if labels is not None:
            labels = [row_label(path, number, value) for (number, _), value in zip(rows, labels)]
        elif self.require_labels:
            raise MiaFastError(
                f"{path}: no {fields.label!r} field; evaluation needs 0/1 labels (pick the field with --label-field)"
            )
        if fields.group and groups is None:
            raise MiaFastError(f"{path}: no {fields.group!r} field for --group-field")
        neighbors = (
            [neighbor_list(path, number, record, fields.neighbors) for number, record in rows]
            if fields.neighbors
            else None
        )
        dataset = Dataset(
            texts=texts,
            ids=ids,
            labels=labels,
            groups=None if groups is None else [str(g) for g in groups],
            neighbors=neighbors,
            source=path,
        )
        if repeats is not None:
            repeats.add([number for number, _ in rows], dataset)
        return cut_to_words(dataset, self.max_words) if self.max_words is not None else dataset


class _Repeats:
    """Ids that occur more than once, and texts labelled both member and non-member, over every block read, each
    id and text held as a 16-byte digest so that memory stays small however long the file."""

    def __init__(self, id_kinds: ColumnKinds | None = None) -> None:
        self.id_kinds = id_kinds or ColumnKinds()
        self.id_lines: dict[bytes, int] = {}
        self.repeated_ids: set[bytes] = set()
        self.id_example: tuple[Any, int, int] | None = None
        self.text_labels: dict[bytes, tuple[int, int]] = {}
        self.contradicted: set[bytes] = set()
        self.text_example: tuple[int, int] | None = None

    def add(self, numbers: list[int], dataset: Dataset) -> None:
        """The rows of ``dataset``, read at lines ``numbers``."""
        for number, value in zip(numbers, dataset.ids or ()):
            self.id_kinds.add(value, number)
            if value is None or value == "":  # a row without an id repeats no other's
                continue
            key = _digest(repr(value))
            first = self.id_lines.setdefault(key, number)
            if first != number and key not in self.repeated_ids:
                self.repeated_ids.add(key)
                self.id_example = self.id_example or (value, first, number)
        for number, text, label in zip(numbers, dataset.texts, dataset.labels or ()):
            key = _digest(text)
            first_label, first = self.text_labels.setdefault(key, (label, number))
            if first_label != label and key not in self.contradicted:
                self.contradicted.add(key)
                self.text_example = self.text_example or (first, number)

    def warn(self, path: Path, *, stacklevel: int = 3) -> None:
        """One warning line for the repeated ids and one for the texts labelled both ways, each with an example."""
        found = []
        if self.id_example is not None:
            value, first, second = self.id_example
            count = len(self.repeated_ids)
            found.append(
                f"{count} {'ids occur' if count > 1 else 'id occurs'} more than once (e.g. {value!r} on lines {first} "
                f"and {second}): rows are matched by position, not id"
            )
        if self.text_example is not None:
            first, second = self.text_example
            count = len(self.contradicted)
            found.append(
                f"{count} {'texts are' if count > 1 else 'text is'} labelled both member and non-member (e.g. lines "
                f"{first} and {second}): their scores cannot separate them"
            )
        for message in found:
            warnings.warn(MiaFastWarning(f"{path}: {message}"), stacklevel=stacklevel)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def cut_to_words(dataset: Dataset, max_words: int) -> Dataset:
    """The dataset with every text (and neighbour text) cut to its first ``max_words`` words."""
    if max_words < 1:
        raise MiaFastError(f"--max-words must be positive, got {max_words}")
    neighbors = dataset.neighbors
    if neighbors is not None:
        neighbors = [tuple(truncate_words(n, max_words) for n in listed) for listed in neighbors]
    return replace(dataset, texts=[truncate_words(t, max_words) for t in dataset.texts], neighbors=neighbors)


def read_dataset(
    path: str | os.PathLike,
    fields: Fields = Fields(),  # noqa: B008  (a frozen dataclass)
    *,
    require_labels: bool = False,
) -> Dataset:
    """Reads the texts of ``fields.text``, plus ids, labels and groups where the file has those fields, and with
    ``fields.neighbors`` each row's list of neighbour texts, all at once."""
    return DataStream(path, fields, require_labels=require_labels).whole()


def read_texts(path: str | os.PathLike, text_field: str = "text") -> list[str]:
    """The texts of a file: a ``.txt`` holds one per line (blank lines skipped), any input format its text field."""
    path = Path(path)
    if path.name.lower().endswith(".txt"):
        try:
            texts = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise MiaFastError(f"{path}: cannot read: {exc}") from None
    else:
        texts = [t for t in read_dataset(path, Fields(text_field, id=None, label=None)).texts if t.strip()]
    if not texts:
        raise MiaFastError(f"{path}: holds no texts")
    return texts


def read_scores(path: str | os.PathLike, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Score columns of a scores file as float64 arrays (NaN where a text could not be scored)."""
    records = [record for _, record in read_rows(path)]
    return {c: np.array([np.nan if r[c] in (None, "") else float(r[c]) for r in records]) for c in columns}
