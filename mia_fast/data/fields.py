"""Which fields of a data file's rows hold what (:class:`Fields`), and each field read from a row: its text, its 0/1
label in any of the spellings the field's datasets use, its list of neighbour texts, and a column that a file has in
every row or in none. A bad value stops the read with the row's line."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mia_fast.data.readers import repeated_field
from mia_fast.data.text import replace_lone_surrogates
from mia_fast.errors import MiaFastError, MiaFastWarning, shown

# Label encodings seen in the field's datasets, mapped to 1 = member, 0 = non-member.
_LABEL_WORDS = {
    "0": 0,
    "1": 1,
    "0.0": 0,
    "1.0": 1,
    "true": 1,
    "false": 0,
    "member": 1,
    "nonmember": 0,
    "non-member": 0,
    "non_member": 0,
    "seen": 1,
    "unseen": 0,
}


@dataclass(frozen=True)
class Fields:
    """The fields of a data file's rows that are read (``--text-field`` and the others): ``text`` holds each row's
    text; ``id``, ``label`` and ``group`` (e.g. the book of a snippet) are read where the file has them, and never
    where None; ``neighbors`` holds each row's list of neighbour texts (None: the rows have none)."""

    text: str = "text"
    id: str | None = "id"
    label: str | None = "label"
    group: str | None = None
    neighbors: str | None = None


def row_text(path: Path, number: int, record: dict, field: str) -> str:
    """The text of the row at line ``number`` (None is the empty text), lone surrogates replaced with a warning."""
    if field not in record:
        present = ", ".join(map(str, record)) or "none"
        raise MiaFastError(
            f"{path}: row at line {number} has no {shown(field)} field (fields: {present}); pick one with --text-field"
        )
    text = record[field]
    if text is None:
        return ""
    if not isinstance(text, str):
        raise MiaFastError(f"{path}: row at line {number}: {shown(field)} is a {type(text).__name__}, not a string")
    text, replaced = replace_lone_surrogates(text)
    if replaced:
        warnings.warn(
            MiaFastWarning(f"{path}: row at line {number}: {replaced} lone surrogate(s) replaced by U+FFFD"),
            stacklevel=2,
        )
    return text


def refuse_repeated_fields(path: Path, rows: list[tuple[int, dict]], fields: Sequence[str | None]) -> None:
    """One line for the first row that names a field the run reads more than once."""
    for number, record in rows:
        if field := repeated_field(record, fields):
            raise MiaFastError(
                f"{path}:{number}: the field {shown(field)} is named more than once in this record; "
                "which value was meant would be a guess"
            )


def neighbor_list(path: str | os.PathLike, number: int, record: dict, field: str) -> tuple[str, ...]:
    """The neighbour texts of the row at line ``number``: a list of texts, or one line saying what is there instead."""
    value = record.get(field)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        found = (
            "missing"
            if field not in record
            else f"a {type(value).__name__}"
            if not isinstance(value, (list, tuple))
            else "a list holding non-texts"
        )
        raise MiaFastError(
            f"{path}: row at line {number}: {shown(field)} is {found}, not a list of texts (--neighbor-field)"
        )
    return tuple(value)


def column(path: Path, rows: list[tuple[int, dict]], field: str | None, present: dict[str, bool]) -> list[Any] | None:
    """The field's values, or None where the file has no such field; ``present`` remembers that across blocks."""
    if not field:
        return None
    has = present.setdefault(field, any(field in record for _, record in rows))
    stray = next((number for number, record in rows if (field in record) != has), None)
    if stray is not None:
        rule = "has no {!r} field while other rows do" if has else "has the {!r} field while earlier rows do not"
        raise MiaFastError(f"{path}: row at line {stray} " + rule.format(field))
    return [record[field] for _, record in rows] if has else None


def parse_label(value: Any) -> int:
    """1 (member) or 0 (non-member) from 0/1, booleans, or words such as "member" and "nonmember"."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    if isinstance(value, str) and value.strip().lower() in _LABEL_WORDS:
        return _LABEL_WORDS[value.strip().lower()]
    raise MiaFastError(f'label {value!r} is neither member (1, true, "member") nor non-member (0, false, "nonmember")')


def row_label(path: Path, number: int, value: Any) -> int:
    """:func:`parse_label` of the row at line ``number``, a bad label refused with that line."""
    try:
        return parse_label(value)
    except MiaFastError as exc:
        raise MiaFastError(f"{path}: row at line {number}: {exc}") from None
