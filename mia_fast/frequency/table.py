"""Token-frequency tables for DC-PDD: per-id counts over a reference corpus, in a file that can be trusted.

File layout (little-endian), format version 3:

    b"MIAFREQ\\0"  uint32 version  uint32 header_length  header (UTF-8 JSON)  zero padding to 8 bytes
    uint64 counts[vocab_size]
    sha256 of everything above (32 bytes)

The JSON header holds ``vocab_size``, ``tokens`` (positions counted), ``documents`` (null when a
token stream had no document boundaries), ``mode`` (``occurrence`` or ``document``),
``max_tokens_per_doc`` (null for no cap), ``tokenizer_fingerprint`` (null when unknown), ``sources`` (each file
counted: its path, size, content sample and the times its documents are counted, see
:mod:`mia_fast.frequency.sources`) and ``tokenized_by`` (the library and version that tokenized the text, one per
library of a merged table; empty for pre-tokenized ids). Version 2, whose sources are paths alone, and version 1,
without ``tokenized_by`` too, are still read. Loading checks every field, the size and the checksum; writing is
atomic.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mia_fast.data.artefacts import write_atomic
from mia_fast.errors import MiaFastError, MiaFastWarning
from mia_fast.frequency.sources import TableSource, merged_sources
from mia_fast.tokens.fingerprint import (
    is_legacy_fingerprint,
    legacy_parts_match,
    tokenizer_fingerprint,
    tokenizer_mismatch,
)

MAGIC = b"MIAFREQ\x00"
FORMAT_VERSION = 3
READ_VERSIONS = (1, 2, 3)
MODES = ("occurrence", "document")
_PREAMBLE = struct.Struct("<8sII")
_CHECKSUM_BYTES = 32
_HEADER_FIELDS = {
    "vocab_size": int,
    "tokens": int,
    "documents": (int, type(None)),
    "mode": str,
    "max_tokens_per_doc": (int, type(None)),
    "tokenizer_fingerprint": (str, type(None)),
    "sources": list,
}
# Fields a version adds to the one before.
_NEW_FIELDS = {2: {"tokenized_by": list}}


class FrequencyTableError(MiaFastError):
    """A table that cannot be read, trusted or combined."""


@dataclass(frozen=True)
class FrequencyTable:
    """Per-id token counts of a reference corpus and how they were made."""

    counts: np.ndarray  # uint64 [vocab_size]
    tokens: int
    documents: int | None
    mode: str = "occurrence"
    max_tokens_per_doc: int | None = None
    tokenizer_fingerprint: str | None = None
    sources: tuple[TableSource, ...] = field(default_factory=tuple)  # a plain path is taken as TableSource(path)
    tokenized_by: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise FrequencyTableError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        sources = tuple(s if isinstance(s, TableSource) else TableSource(str(s)) for s in self.sources)
        object.__setattr__(self, "sources", sources)  # frozen: the one assignment that completes construction

    @property
    def vocab_size(self) -> int:
        return len(self.counts)

    @property
    def fingerprint(self) -> str | None:
        return self.tokenizer_fingerprint

    def log_probs(self, vocab_size: int | None = None) -> np.ndarray:
        """ln f(v) = ln((count(v) + 1) / (N + |V|)) over |V| = ``vocab_size`` ids (default: the table's).

        A model vocabulary larger than the table's (padding rows of the output head) gets zero counts
        for the extra ids; a smaller one is refused.
        """
        vocab_size = self.vocab_size if vocab_size is None else vocab_size
        if vocab_size < self.vocab_size:
            raise FrequencyTableError(
                f"the table covers {self.vocab_size} ids but the model's vocabulary has only {vocab_size}"
            )
        counts = np.zeros(vocab_size, dtype=np.float64)
        counts[: self.vocab_size] = self.counts
        return np.log(counts + 1.0) - np.log(counts.sum() + vocab_size)

    # ---- the file format ----

    def header(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "tokens": int(self.tokens),
            "documents": None if self.documents is None else int(self.documents),
            "mode": self.mode,
            "max_tokens_per_doc": self.max_tokens_per_doc,
            "tokenizer_fingerprint": self.tokenizer_fingerprint,
            "sources": [source.record() for source in self.sources],
            "tokenized_by": list(self.tokenized_by),
        }

    def to_bytes(self) -> bytes:
        header = json.dumps(self.header(), ensure_ascii=False).encode("utf-8")
        padding = b"\x00" * (-(_PREAMBLE.size + len(header)) % 8)
        body = b"".join(
            [_PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header)), header, padding, self.counts.astype("<u8").tobytes()]
        )
        return body + hashlib.sha256(body).digest()

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "table") -> FrequencyTable:
        """Parses and verifies a table image; every defect raises :class:`FrequencyTableError`."""

        def fail(reason: str) -> FrequencyTableError:
            return FrequencyTableError(f"{name}: {reason}")

        if len(data) < _PREAMBLE.size or data[: len(MAGIC)] != MAGIC:
            raise fail("not a mia-fast frequency table (no MIAFREQ magic)")
        _, version, header_length = _PREAMBLE.unpack_from(data)
        if version not in READ_VERSIONS:
            raise fail(f"format version {version}; this mia-fast reads versions {', '.join(map(str, READ_VERSIONS))}")
        if (
            len(data) < _PREAMBLE.size + _CHECKSUM_BYTES
            or hashlib.sha256(data[:-_CHECKSUM_BYTES]).digest() != data[-_CHECKSUM_BYTES:]
        ):
            raise fail("checksum mismatch: the file is truncated or corrupt")
        counts_at = _PREAMBLE.size + header_length + (-(_PREAMBLE.size + header_length) % 8)
        if counts_at > len(data) - _CHECKSUM_BYTES:
            raise fail("the header runs past the end of the file")
        try:
            header = json.loads(data[_PREAMBLE.size : _PREAMBLE.size + header_length].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise fail(f"unreadable header: {exc}") from None
        fields = dict(_HEADER_FIELDS)
        for since, added in _NEW_FIELDS.items():
            if version >= since:
                fields |= added
        if not isinstance(header, dict) or set(header) != set(fields):
            raise fail(f"the header must hold exactly the fields {', '.join(fields)}")
        for key, kind in fields.items():
            if not isinstance(header[key], kind) or isinstance(header[key], bool):
                raise fail(f"header field {key!r} has the wrong type ({type(header[key]).__name__})")
        vocab_size = header["vocab_size"]
        tokenized_by = header.get("tokenized_by", [])
        if vocab_size < 1 or not all(isinstance(s, str) for s in tokenized_by):
            raise fail("the header's vocab_size must be positive, its tokenized_by strings")
        if not all(isinstance(s, str if version < 3 else dict) for s in header["sources"]):
            raise fail(f"the sources of a table of version {version} must be {'paths' if version < 3 else 'objects'}")
        try:
            sources = tuple(TableSource.from_record(s) for s in header["sources"])
        except MiaFastError as exc:
            raise fail(str(exc)) from None
        if len(data) - _CHECKSUM_BYTES - counts_at != 8 * vocab_size:
            raise fail(
                f"holds {len(data) - _CHECKSUM_BYTES - counts_at} bytes of counts, "
                f"expected {8 * vocab_size} for {vocab_size} ids"
            )
        counts = np.frombuffer(data, dtype="<u8", count=vocab_size, offset=counts_at).astype(np.uint64)
        total = int(counts.sum(dtype=np.uint64))
        tokens, mode = header["tokens"], header["mode"]
        if mode not in MODES or (mode == "occurrence" and total != tokens) or (mode == "document" and total > tokens):
            raise fail(f"counts add up to {total}, inconsistent with {tokens} tokens in {mode} mode")
        cap, documents = header["max_tokens_per_doc"], header["documents"]
        if (cap is not None and cap < 1) or (documents is not None and documents < 0) or tokens < 0:
            raise fail("max_tokens_per_doc must be positive, documents and tokens not negative")
        return cls(
            counts,
            tokens,
            documents,
            mode,
            cap,
            header["tokenizer_fingerprint"],
            sources,
            tuple(tokenized_by),
        )

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Writes the table atomically (temporary file, fsync, rename); an existing file needs ``overwrite``."""
        path = Path(path)
        if path.exists() and not overwrite:
            raise FrequencyTableError(f"{path} exists; pass --overwrite (overwrite=True) to replace it")
        write_atomic(path, self.to_bytes())
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> FrequencyTable:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise FrequencyTableError(f"cannot read frequency table {path}: {exc.strerror or exc}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def merge(
        cls, tables: Sequence[FrequencyTable], names: Sequence[str] = (), *, allow_overlap: bool = False
    ) -> FrequencyTable:
        """Adds tables built with the same tokenizer, vocabulary, mode and cap (e.g. from corpus shards), named in
        refusals by ``names`` (default: table 1, table 2, ...).

        Tokenizers are compared part by part (:func:`~mia_fast.tokens.fingerprint.tokenizer_mismatch`); a table of an
        older mia-fast matches only another of equal fingerprint, with a warning. No document is counted twice: a
        table's copy, or a source two tables share (:mod:`mia_fast.frequency.sources`), is refused naming it, unless
        ``allow_overlap``; the merged table then lists each source once, with the times its documents are counted.
        """
        if not tables:
            raise FrequencyTableError("nothing to merge")
        names = list(names) or [f"table {i}" for i in range(1, len(tables) + 1)]
        first = tables[0]
        for name, table in zip(names[1:], tables[1:]):
            for attribute in ("vocab_size", "mode", "max_tokens_per_doc"):
                if getattr(table, attribute) != getattr(first, attribute):
                    raise FrequencyTableError(
                        f"cannot merge {names[0]} and {name}: {name} has {attribute} {getattr(table, attribute)!r}, "
                        f"{names[0]} has {getattr(first, attribute)!r}"
                    )
        unchecked = _check_tokenizers(tables, names)
        if not allow_overlap:
            _refuse_copies(tables, names)
        try:
            sources = merged_sources([t.sources for t in tables], names, allow_overlap=allow_overlap)
        except MiaFastError as exc:
            raise FrequencyTableError(str(exc)) from None
        if unchecked:
            warnings.warn(MiaFastWarning(unchecked), stacklevel=2)
        documents = [t.documents for t in tables]
        return cls(
            counts=np.sum([t.counts for t in tables], axis=0, dtype=np.uint64),
            tokens=sum(t.tokens for t in tables),
            documents=None if None in documents else sum(documents),
            mode=first.mode,
            max_tokens_per_doc=first.max_tokens_per_doc,
            tokenizer_fingerprint=first.tokenizer_fingerprint,
            sources=sources,
            tokenized_by=tuple(dict.fromkeys(library for t in tables for library in t.tokenized_by)),
        )


def _check_tokenizers(tables: Sequence[FrequencyTable], names: Sequence[str]) -> str | None:
    """Refuses tables whose tokenizers differ or cannot be shown to match, naming the part that differs; says what
    cannot be checked where they match only as far as their records tell (no fingerprint, or an older mia-fast's)."""
    first = tables[0].tokenizer_fingerprint
    for name, table in zip(names[1:], tables[1:]):
        other = table.tokenizer_fingerprint
        if other == first:
            continue
        pair = f"cannot merge {names[0]} and {name}"
        if first is None or other is None:
            unknown = names[0] if first is None else name
            raise FrequencyTableError(
                f"{pair}: {unknown} records no tokenizer, so the two cannot be shown to share one; "
                f"rebuild {unknown} with its tokenizer (freq build, or freq build-tokens --tokenizer)"
            )
        older = [n for n, fingerprint in ((names[0], first), (name, other)) if is_legacy_fingerprint(fingerprint)]
        if len(older) == 1:
            raise FrequencyTableError(
                f"{pair}: {older[0]} records the tokenizer fingerprint of an older mia-fast, which covers only the "
                f"vocabulary, merges and added tokens, so a match cannot be proven; rebuild {older[0]} with this "
                "mia-fast (freq build, or freq build-tokens --tokenizer)"
            )
        differs = (
            "even their vocabularies, merges or added tokens differ" if older else tokenizer_mismatch(other, first)
        )
        raise FrequencyTableError(f"{pair}: they were counted with different tokenizers ({differs})")
    if len(tables) == 1 or not (first is None or is_legacy_fingerprint(first)):
        return None
    if first is None:
        return "the tables record no tokenizer, so they cannot be checked to share one"
    return (
        "the tables were counted by an older mia-fast, whose fingerprint covers only the vocabulary, merges and "
        "added tokens: their normalizers, pre-tokenizers and post-processors cannot be checked to match; rebuild them "
        "to be sure"
    )


def _refuse_copies(tables: Sequence[FrequencyTable], names: Sequence[str]) -> None:
    """Refuses a table merged with its own copy, named as such (its sources, where it records any, are shared too)."""
    seen: dict[tuple, int] = {}
    for index, table in enumerate(tables):
        first = seen.setdefault((table.tokens, table.documents, table.sources), index)
        if (
            first != index
            and table.header() == tables[first].header()
            and np.array_equal(table.counts, tables[first].counts)
        ):
            raise FrequencyTableError(
                f"cannot merge {names[first]} and {names[index]}: they are copies of one table, whose documents would "
                "be counted twice; pass --allow-overlap (allow_overlap=True) to merge them anyway"
            )


def is_table_file(path: str | os.PathLike) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def load_counts(source: str | os.PathLike | np.ndarray) -> np.ndarray:
    """Per-id counts from a ``.npy`` file or an array, checked to be a 1-D vector of non-negative integers."""
    if isinstance(source, np.ndarray):
        counts, name = source, "counts"
    else:
        name = os.fspath(source)
        try:
            counts = np.load(name, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise MiaFastError(f"could not read frequency counts {name}: {exc}") from None
    if counts.ndim != 1 or counts.size == 0:
        raise MiaFastError(f"{name}: frequency counts must be a non-empty 1-D vector, got shape {counts.shape}")
    if counts.dtype.kind not in "iu" or (counts.dtype.kind == "i" and counts.min() < 0):
        raise MiaFastError(f"{name}: frequency counts must be non-negative integers, got dtype {counts.dtype}")
    return counts.astype(np.uint64)


def laplace_log_frequencies(counts: np.ndarray, vocab_size: int) -> np.ndarray:
    """ln f(v) with f(v) = (count(v) + 1) / (N + |V|), |V| the model's vocabulary size."""
    if len(counts) != vocab_size:
        raise MiaFastError(
            f"frequency counts cover {len(counts)} ids but the model's vocabulary has {vocab_size}; "
            "build them with the model's own tokenizer"
        )
    total = float(counts.sum(dtype=np.float64))
    return np.log(counts.astype(np.float64) + 1.0) - np.log(total + vocab_size)


def model_log_frequencies(
    source: str | os.PathLike | np.ndarray | FrequencyTable, tokenizer: Any, vocab_size: int
) -> np.ndarray:
    """ln f(v) over the model's vocabulary from a table (file or object) or a bare counts vector (.npy or array).

    A table must come from the model's own tokenizer (equal fingerprints); it may cover fewer ids than
    the model's output head. Bare counts carry no provenance, so their length must equal the model's
    vocabulary exactly.
    """
    if isinstance(source, (str, os.PathLike)) and is_table_file(source):
        source = FrequencyTable.load(source)
    if not isinstance(source, FrequencyTable):
        return laplace_log_frequencies(load_counts(source), vocab_size)
    check_table_tokenizer(source, tokenizer)
    if source.tokenizer_fingerprint is None and source.vocab_size != vocab_size:
        raise FrequencyTableError(
            f"the table covers {source.vocab_size} ids but the model's vocabulary has {vocab_size}"
        )
    return source.log_probs(vocab_size)


def check_table_tokenizer(table: FrequencyTable, tokenizer: Any, name: str = "the frequency table") -> None:
    """Refuses a table (called ``name``) counted by another tokenizer than ``tokenizer``, naming the part that
    differs (:func:`~mia_fast.tokens.fingerprint.tokenizer_mismatch`). A table without a fingerprint, or with an older
    mia-fast's whose vocabulary, merges and added tokens match, is used with one warning saying what cannot be
    checked and how to rebuild it."""
    recorded, current = table.tokenizer_fingerprint, tokenizer_fingerprint(tokenizer)
    rebuild = "rebuild it with 'mia-fast freq build CORPUS --tokenizer MODEL' and the model's own tokenizer"
    if recorded == current:
        return
    if recorded is None:
        warnings.warn(
            MiaFastWarning(
                f"{name} has no tokenizer fingerprint, so it cannot be checked against the model's tokenizer"
            ),
            stacklevel=3,
        )
    elif is_legacy_fingerprint(recorded) and legacy_parts_match(recorded, tokenizer):
        warnings.warn(
            MiaFastWarning(
                f"{name} was built by an older mia-fast whose fingerprint covered only the vocabulary, merges and "
                f"added tokens: it is used, although its normalizer, pre-tokenizer and post-processor cannot be "
                f"checked; {rebuild} to check them"
            ),
            stacklevel=3,
        )
    else:
        differs = tokenizer_mismatch(recorded, current, tokenizer)
        raise FrequencyTableError(f"{name} was built with another tokenizer ({differs}); {rebuild}")
